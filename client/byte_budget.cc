#include "client/byte_budget.h"

namespace zerostate::client {

void ByteBudget::Acquire(size_t bytes) {
  absl::MutexLock lock(&mu_);
  struct Fits {
    ByteBudget* b;
    size_t bytes;
    bool operator()() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu_) {
      return b->held_ == 0 || b->held_ + bytes <= b->cap_;
    }
  } fits{this, bytes};
  mu_.Await(absl::Condition(&fits));
  held_ += bytes;
}

bool ByteBudget::TryAcquire(size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (held_ != 0 && held_ + bytes > cap_) return false;
  held_ += bytes;
  return true;
}

void ByteBudget::Release(size_t bytes) {
  absl::MutexLock lock(&mu_);
  held_ -= bytes;
}

size_t ByteBudget::held() {
  absl::MutexLock lock(&mu_);
  return held_;
}

}  // namespace zerostate::client
