// An Env that wraps another and injects faults by rule, for tests: a
// request that matches a rule fails with EIO or ENOSPC (without touching
// the disk), completes as a short read, has bytes of its buffer
// corrupted after it was read (as a disk returning bad data would), or is
// delayed until a hook of the test returns (a slow disk).
// Thread-safe; rules may change while queues are in use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/core/io/env.h"

namespace zerostate::server::io {

enum class FaultKind {
  kEio,        // the request fails with -EIO, nothing transferred
  kEnospc,     // the request fails with -ENOSPC, nothing transferred
  kShortRead,  // a read completes with half its bytes
  kCorrupt,    // a read completes, then one byte of its buffer is flipped
  kDelay,      // FaultRule::delay runs (on the submitting thread), then the request goes on
};

struct FaultRule {
  FaultKind kind = FaultKind::kEio;
  std::optional<IoOp> op;     // unset: reads and writes
  std::string path_contains;  // empty: every file
  uint64_t skip = 0;          // matching requests let through before faulting
  uint64_t times = 1;         // matching requests faulted after that (UINT64_MAX: all)
  std::function<void()> delay;  // kDelay: returns when the request may go on
};

class FaultEnv final : public Env {
 public:
  // `base` does the real I/O.
  explicit FaultEnv(std::shared_ptr<Env> base) : base_(std::move(base)) {}

  void AddRule(FaultRule rule);
  void ClearRules();
  uint64_t faults_injected() const;

  [[nodiscard]] absl::StatusOr<std::unique_ptr<File>> CreateFile(const std::string& path) override {
    return base_->CreateFile(path);
  }
  [[nodiscard]] absl::Status DeleteFile(const std::string& path) override {
    return base_->DeleteFile(path);
  }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<IoQueue>> NewQueue(int depth) override;

  // The rule that fires for `r`, if one does (counts the match).
  std::optional<FaultRule> Decide(const IoRequest& r);

 private:
  struct Armed {
    FaultRule rule;
    uint64_t seen = 0;
  };
  const std::shared_ptr<Env> base_;
  mutable absl::Mutex mu_;
  std::vector<Armed> rules_ ABSL_GUARDED_BY(mu_);
  uint64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server::io
