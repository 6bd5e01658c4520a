// The server-wide budget of gradient staging memory (--staging_budget_bytes).
//
// A block's gradient accumulator folds each node's pieces into the sum in
// node order; a piece of a node that arrives before its turn is decoded
// into a staging buffer of the block's size until then
// (server/core/gradient_accumulator.h). Those buffers are not part of any
// job's RAM estimate: unbounded, nodes out of step would push a server
// past its RAM budget by up to (nodes - 1) x 4 bytes per parameter. Every
// staging buffer of every job is therefore taken from this one budget and
// given back when folded, on Reset, and when its job is deleted.
//
// A piece that finds the budget spent waits (JobPushes::Push) for a change that
// may let it in: bytes given back anywhere, or a head advancing (its node
// may have become its block's head, which needs no staging). Waiters
// never hold a block's mutex. The head node's pieces never need staging,
// so waiting cannot stop a step from completing.
//
// Thread-safe. Lock order: a block's mutex, then this budget's.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zerostate::server {

class ServerMetrics;

class StagingBudget {
 public:
  // `metrics` (may be null) gets the bytes in use, the budget and each wait.
  explicit StagingBudget(uint64_t budget_bytes, ServerMetrics* metrics = nullptr);

  StagingBudget(const StagingBudget&) = delete;
  StagingBudget& operator=(const StagingBudget&) = delete;

  // Takes `bytes` if that many are free; false (nothing taken) otherwise.
  bool TryTake(uint64_t bytes);
  // Gives back bytes taken before, and wakes waiters.
  void Give(uint64_t bytes);
  // Wakes waiters without giving anything back: something they may be
  // waiting for changed (a block's head advanced, a job shut down).
  void Notify();

  // Counts Give and Notify calls. A caller reads it under the lock that
  // guards the state it tried (a block's mutex) before letting that lock
  // go, then waits with AwaitChange: no change between the two is missed.
  uint64_t generation() const;
  // Waits until generation() differs from `seen`; false if `deadline`
  // came first.
  bool AwaitChange(uint64_t seen, absl::Time deadline);

  // UNAVAILABLE (the client retries it) for a piece of `what` that needed
  // `bytes` of staging and found none in time; names the budget, the
  // bytes in use and the flag.
  [[nodiscard]] absl::Status Exhausted(const std::string& what, uint64_t bytes) const;

  uint64_t budget() const { return budget_; }
  uint64_t used() const;
  // Bytes a TryTake could take now.
  uint64_t free() const;
  // Pushes waiting in AwaitChange now (tests wait for a waiter to be there).
  int waiters() const;

 private:
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Block::mu names mu_ in its declared lock order (block.h): a push
  // reads generation() under its block's mutex.
  friend class Block;

  const uint64_t budget_;
  ServerMetrics* const metrics_;
  // Last in the lock order: taken under a Block::mu, never before one.
  mutable absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
