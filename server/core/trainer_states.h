// The trainer's own small state per version of a job (StepRequest's
// trainer_state; zerostate-worker keeps its fp16 loss scaler there), so
// that every rank and a later run read what the coordinator decided
// without a rendezvous. Opaque bytes; only the newest kKept versions are
// kept: readers ask for the version they just reached or resume from.
// Lives and dies with the Job; a checkpoint keeps its version's state
// (ShardManifest.trainer_state), and a restored job starts with it.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {

class TrainerStates {
 public:
  static constexpr size_t kMaxBytes = 1024;
  static constexpr size_t kKept = 4;

  // INVALID_ARGUMENT if `state` is too large to keep.
  [[nodiscard]] static absl::Status Check(const std::string& state) {
    if (state.size() <= kMaxBytes) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("trainer_state: ", state.size(), " bytes exceed ", kMaxBytes));
  }

  // Keeps `state` as version `version`'s (replacing an earlier one: a
  // retried step carries the same bytes) and forgets versions beyond the
  // newest kKept. REQUIRES: Check(state) is OK.
  void Record(uint64_t version, const std::string& state) {
    absl::MutexLock lock(&mu_);
    by_version_.insert_or_assign(version, state);
    while (by_version_.size() > kKept) by_version_.erase(by_version_.begin());
  }

  // The state kept for `version`, if any.
  std::optional<std::string> Find(uint64_t version) const {
    absl::MutexLock lock(&mu_);
    auto it = by_version_.find(version);
    if (it == by_version_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::string> by_version_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
