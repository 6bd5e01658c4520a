#include "server/dataplane/data_buffers.h"

#include <utility>

namespace zerostate::server {

DataBufferPool::Lease& DataBufferPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    GiveBack();
    pool_ = std::exchange(other.pool_, nullptr);
    buffer_ = std::move(other.buffer_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DataBufferPool::Lease::GiveBack() {
  if (pool_ == nullptr) return;
  std::exchange(pool_, nullptr)->Return(std::move(buffer_), bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

DataBufferPool::Lease DataBufferPool::Borrow(size_t bytes, bool wait) {
  Lease lease;
  {
    absl::MutexLock lock(&mu_);
    while (wait && borrowed_ != 0 && borrowed_ + bytes > budget_) returned_.Wait(&mu_);
    borrowed_ += bytes;
    for (size_t i = 0; i < idle_.size(); ++i) {
      if (idle_[i]->capacity() >= bytes) {
        idle_bytes_ -= idle_[i]->capacity();
        lease.buffer_ = std::move(idle_[i]);
        idle_.erase(idle_.begin() + i);
        break;
      }
    }
  }
  if (!lease.buffer_) lease.buffer_ = std::make_unique<FrameBuffer>();
  lease.pool_ = this;
  lease.data_ = lease.buffer_->Reserve(bytes);
  lease.bytes_ = bytes;
  return lease;
}

void DataBufferPool::Return(std::unique_ptr<FrameBuffer> buffer, size_t bytes) {
  absl::MutexLock lock(&mu_);
  borrowed_ -= bytes;
  returned_.SignalAll();
  if (buffer && borrowed_ + idle_bytes_ + buffer->capacity() <= budget_) {
    idle_bytes_ += buffer->capacity();
    idle_.push_back(std::move(buffer));
  }
  // else: freed here (after the lock, as `buffer` goes out of scope last)
}

}  // namespace zerostate::server
