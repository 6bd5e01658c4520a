// LocalGroup for threads of one process.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "worker/local_group.h"

namespace zerostate::worker {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, FreeDeleter>;

Buffer ZeroedBuffer(uint64_t elems) {
  size_t bytes = (elems * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
  std::memset(p, 0, bytes);
  return Buffer(p);
}

class ThreadGroup : public LocalGroup {
 public:
  ThreadGroup(uint32_t ranks, uint64_t elems, absl::Duration timeout)
      : elems_(elems), timeout_(timeout), barrier_(std::make_unique<LocalBarrierState>()) {
    for (uint32_t r = 0; r < ranks; ++r) {
      params_.push_back(ZeroedBuffer(elems));
      grads_.push_back(ZeroedBuffer(elems));
    }
  }
  uint32_t size() const override { return static_cast<uint32_t>(params_.size()); }
  uint64_t elems() const override { return elems_; }
  float* params(uint32_t rank) override { return params_[rank].get(); }
  float* grads(uint32_t rank) override { return grads_[rank].get(); }
  absl::Status Barrier(uint32_t rank) override {
    return LocalBarrierWait(barrier_.get(), size(), rank, /*shared=*/false, timeout_);
  }
  absl::StatusOr<bool> Vote(uint32_t rank, bool failed) override {
    return LocalVote(barrier_.get(), size(), rank, /*shared=*/false, timeout_, failed);
  }

 private:
  const uint64_t elems_;
  const absl::Duration timeout_;
  std::vector<Buffer> params_, grads_;
  std::unique_ptr<LocalBarrierState> barrier_;  // value-initialized: zeros
};

}  // namespace

std::unique_ptr<LocalGroup> MakeThreadGroup(uint32_t ranks, uint64_t elems,
                                            absl::Duration timeout) {
  return std::make_unique<ThreadGroup>(ranks, elems, timeout);
}

}  // namespace zerostate::worker
