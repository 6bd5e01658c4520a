// Folds go before speculations.
//
// A speculative job's backward completes its blocks last layer first, so
// the pushes that arrive last fold the blocks the next forward needs
// first, while the speculation pool steps the later layers' blocks. On a
// host whose memory bandwidth is the limit, a speculation running beside
// a fold takes its bandwidth, and the first layer's gradient is folded (and
// then stepped, and gathered) late. The schedule that reaches the path's
// floor (bench/step/path_schedule.h) gives every free thread the lowest
// piece with work ready: a fold, whose block is lower than any block
// already queued for speculation. FoldGate is that order for the pool:
// each fold holds a Scope, and a speculation starts only while none does.
// A fold never waits inside its Scope (it is the kernel alone), so a
// speculation waits at most for the folds under way.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::server {

class FoldGate {
 public:
  // One fold under way, from construction to destruction.
  class Scope {
   public:
    explicit Scope(FoldGate* gate) : gate_(gate) {
      if (gate_ == nullptr) return;
      absl::MutexLock lock(&gate_->mu_);
      ++gate_->folds_;
    }
    ~Scope() {
      if (gate_ == nullptr) return;
      absl::MutexLock lock(&gate_->mu_);
      --gate_->folds_;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    FoldGate* const gate_;
  };

  // Returns once no fold is under way.
  void AwaitNoFold() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &FoldGate::NoFold));
  }

 private:
  bool NoFold() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return folds_ == 0; }

  absl::Mutex mu_;
  int folds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
