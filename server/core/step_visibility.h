// What of a job's shard may be seen, and whether this copy may answer for
// it: the visibility and fencing part of the step (JobStep keeps one and
// answers through it).
//
// Visibility: gathers serve versions up to visible_through() only. A
// replicated step's new version is held back (HoldBack) until every backup
// holds the step (ShowAll), so no rank moves past a step a failover could
// still take back.
//
// Fencing (docs/reliability.md, "Replicated shards"): a copy is deposed
// when a backup of its shard answered its step that it serves the shard as
// primary now; until a catch-up replaces its state (Undepose) it serves
// nothing as primary and gathers waiting on it end with CheckNotDeposed's
// error.
//
// Every change takes and releases each block's mutex, which wakes the
// gathers waiting on them. Thread-safe; never blocks on the pass.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/core/block.h"

namespace zerostate::server {

class StepVisibility {
 public:
  // `blocks` outlives this object.
  explicit StepVisibility(const std::vector<std::unique_ptr<Block>>* blocks) : blocks_(blocks) {}

  // The newest version gathers may serve (UINT64_MAX: every one).
  uint64_t visible_through() const { return visible_through_.load(); }
  // Versions after `step` are not served until ShowAll.
  void HoldBack(uint64_t step) { visible_through_ = step; }
  // Every version is served; waiting gathers wake.
  void ShowAll();

  // Deposed, `why` naming the shard and its new primary; waiting gathers wake.
  void MarkDeposed(std::string why) ABSL_LOCKS_EXCLUDED(mu_);
  bool deposed() const { return deposed_flag_.load(); }
  // OK, or UNAVAILABLE with MarkDeposed's reason while deposed.
  [[nodiscard]] absl::Status CheckNotDeposed() const ABSL_LOCKS_EXCLUDED(mu_);
  // No longer deposed (a catch-up replaced the copy's state); every
  // version is served; waiting gathers wake.
  void Undepose() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Takes and releases every block's mutex: gathers waiting on a block
  // look again at what they wait for.
  void WakeBlocks();

  const std::vector<std::unique_ptr<Block>>* const blocks_;
  std::atomic<uint64_t> visible_through_{UINT64_MAX};
  mutable absl::Mutex mu_;
  std::string deposed_ ABSL_GUARDED_BY(mu_);  // why; empty: not deposed
  std::atomic<bool> deposed_flag_{false};     // !deposed_.empty(), read under blocks' mutexes
};

}  // namespace zerostate::server
