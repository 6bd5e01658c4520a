// The CPU backend: the built-in MLP in fp32 on the host, local ranks
// exchanging through a LocalGroup (threads or shared-memory processes).
// Deterministic: the same inputs give the same bits on every run.
// Thread safety: one thread per CpuBackend; the group is shared.
#pragma once

#include <memory>

#include "worker/backend.h"
#include "worker/local_group.h"

namespace zerostate::worker {

class CpuBackend : public Backend {
 public:
  // `group` (not owned) must outlive this and hold buffers of the layout's
  // total_elems. REQUIRES: local_rank < group->size(), model bound to the layout.
  CpuBackend(LocalGroup* group, uint32_t local_rank, std::unique_ptr<Mlp> model);

  uint32_t local_rank() const override { return rank_; }
  uint32_t local_size() const override { return group_->size(); }
  [[nodiscard]] absl::Status ZeroGrads() override;
  [[nodiscard]] absl::StatusOr<float> ForwardBackward(const float* x, const float* y,
                                                      uint32_t batch, float loss_scale,
                                                      const GradsReadyFn& ready) override;
  bool SetWeightsNeeded(WeightsNeededFn need) override;
  [[nodiscard]] absl::Status StartReduceScatter(Range bucket, void* host_out) override;
  [[nodiscard]] absl::Status AllGather(Range bucket, const void* host_in) override;
  [[nodiscard]] absl::Status ReadParams(Range elems, float* host) override;
  // The group's buffers, on a group of one rank.
  float* GradsInPlace() override;
  float* ParamsInPlace() override;
  [[nodiscard]] absl::StatusOr<bool> NodeAnyFailed(bool failed) override;
  [[nodiscard]] absl::StatusOr<HostBuffer> AllocHost(uint64_t elems) override;

 private:
  LocalGroup* const group_;
  const uint32_t rank_;
  std::unique_ptr<Mlp> model_;
  WeightsNeededFn need_;
  // ZeroGrads was called: the next ForwardBackward writes the gradients
  // rather than adding to them (the buffer's elements between tensors are
  // zero from its allocation, and nothing writes them).
  bool zero_pending_ = false;
};

}  // namespace zerostate::worker
