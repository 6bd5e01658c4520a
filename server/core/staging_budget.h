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
// The buffers themselves are pooled: one given back is kept idle for the
// next early piece of the same size (no allocation, no zeroing, no page
// faults: a fresh block-sized buffer costs its pages' faults on a push's
// path, every step). The memory held, in use and idle together, stays
// within the budget, and idle buffers beyond the most in use at once
// during the last period in which staging was in use (from the first
// buffer taken until every one came back: usually a step's pushes) are
// freed when that period ends, so a server keeps what its steps stage.
//
// Thread-safe. Lock order: a block's mutex, then this budget's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/aligned_buffer.h"

namespace zerostate::server {

class ServerMetrics;

class StagingBudget {
 public:
  // `metrics` (may be null) gets the bytes in use, the budget and each wait.
  explicit StagingBudget(uint64_t budget_bytes, ServerMetrics* metrics = nullptr);

  StagingBudget(const StagingBudget&) = delete;
  StagingBudget& operator=(const StagingBudget&) = delete;

  // A staging buffer of `floats` floats if its bytes are free: an idle one
  // of that size (its contents arbitrary: the accumulator reads only what
  // it decoded into it), else a new one (idle ones of other sizes freed
  // first where memory held would exceed the budget); nullopt (nothing
  // taken) otherwise. REQUIRES: floats > 0.
  std::optional<AlignedBuffer<float>> TryTake(size_t floats);
  // Gives back a buffer TryTake gave (kept idle for the next TryTake, or
  // freed), and wakes waiters.
  void Give(AlignedBuffer<float> buffer);
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
  // Bytes of the buffers taken and not given back.
  uint64_t used() const;
  // Bytes of the idle buffers kept for reuse.
  uint64_t idle() const;
  // Bytes a TryTake could take now.
  uint64_t free() const;
  // Pushes waiting in AwaitChange now (tests wait for a waiter to be there).
  int waiters() const;

 private:
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves idle buffers into `freed` (for the caller to free once mu_ is
  // let go) until at most `keep` bytes of them are left.
  void TrimIdleLocked(uint64_t keep, std::vector<AlignedBuffer<float>>& freed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Block::mu names mu_ in its declared lock order (block.h): a push
  // reads generation() under its block's mutex.
  friend class Block;

  const uint64_t budget_;
  ServerMetrics* const metrics_;
  // Last in the lock order: taken under a Block::mu, never before one.
  mutable absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<AlignedBuffer<float>> idle_ ABSL_GUARDED_BY(mu_);  // for reuse
  uint64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The most bytes in use at once since staging was last all given back,
  // and during the period before that one: idle buffers are kept up to it.
  uint64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_peak_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
