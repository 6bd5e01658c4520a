// The payload buffers of the TCP data plane's sessions, shared by all of
// them under one byte budget: a session borrows a buffer for one frame (a
// push's payload while it is read and folded, a gather piece while it is
// filled and sent) and gives it back, so the memory held follows the
// frames in flight, not the connections open. Idle buffers are kept for
// reuse while they and the borrowed ones fit in the budget.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/frame_io.h"

namespace zerostate::server {

class DataBufferPool {
 public:
  explicit DataBufferPool(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // A borrowed buffer; given back when destroyed or reassigned.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { GiveBack(); }
    uint8_t* data() { return data_; }

   private:
    friend class DataBufferPool;
    void GiveBack();
    DataBufferPool* pool_ = nullptr;
    std::unique_ptr<FrameBuffer> buffer_;
    uint8_t* data_ = nullptr;
    size_t bytes_ = 0;
  };

  // A buffer of at least `bytes`. With `wait`, waits while the bytes
  // borrowed would pass the budget (a request larger than the whole budget
  // goes through once nothing else is borrowed); without, never waits (for
  // a caller that holds a lock others need to give buffers back).
  Lease Borrow(size_t bytes, bool wait);

  uint64_t borrowed() const {
    absl::MutexLock lock(&mu_);
    return borrowed_;
  }
  uint64_t idle() const {
    absl::MutexLock lock(&mu_);
    return idle_bytes_;
  }

 private:
  void Return(std::unique_ptr<FrameBuffer> buffer, size_t bytes);

  const uint64_t budget_;
  mutable absl::Mutex mu_;
  uint64_t borrowed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar returned_;  // signalled whenever a buffer is given back
  std::vector<std::unique_ptr<FrameBuffer>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
