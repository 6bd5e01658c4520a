#include "worker/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "trainer/bucket_plan.h"

namespace zerostate::worker {

CpuBackend::CpuBackend(LocalGroup* group, uint32_t local_rank, std::unique_ptr<Mlp> model)
    : group_(group), rank_(local_rank), model_(std::move(model)) {}

absl::Status CpuBackend::ZeroGrads() {
  zero_pending_ = true;  // the next backward overwrites, row by row in cache
  return absl::OkStatus();
}

absl::StatusOr<float> CpuBackend::ForwardBackward(const float* x, const float* y, uint32_t batch,
                                                  float loss_scale, const GradsReadyFn& ready) {
  return model_->ForwardBackward(group_->params(rank_), x, y, batch, loss_scale,
                                 group_->grads(rank_), ready, need_,
                                 std::exchange(zero_pending_, false));
}

bool CpuBackend::SetWeightsNeeded(WeightsNeededFn need) {
  need_ = std::move(need);
  return true;
}

absl::Status CpuBackend::StartReduceScatter(Range bucket, void* host) {
  float* host_out = static_cast<float*>(host);  // grad_staging(): FP32
  // Every rank's gradients of `bucket` are final once all have arrived;
  // nobody writes them again before the next step's ZeroGrads, which comes
  // after the AllGather barriers of this step.
  if (auto s = group_->Barrier(rank_); !s.ok()) return s;
  const Range share = trainer::LocalShare(bucket, group_->size(), rank_);
  const size_t n = share.size();
  std::memcpy(host_out, group_->grads(0) + share.begin, n * sizeof(float));
  for (uint32_t r = 1; r < group_->size(); ++r) {
    const float* g = group_->grads(r) + share.begin;
    for (size_t i = 0; i < n; ++i) host_out[i] += g[i];
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AllGather(Range bucket, const void* host) {
  const float* host_in = static_cast<const float*>(host);  // weight_staging(): FP32
  const Range mine = trainer::LocalShare(bucket, group_->size(), rank_);
  std::memcpy(group_->params(rank_) + mine.begin, host_in, mine.size() * sizeof(float));
  if (auto s = group_->Barrier(rank_); !s.ok()) return s;
  for (uint32_t r = 0; r < group_->size(); ++r) {
    if (r == rank_) continue;
    const Range share = trainer::LocalShare(bucket, group_->size(), r);
    std::memcpy(group_->params(rank_) + share.begin, group_->params(r) + share.begin,
                share.size() * sizeof(float));
  }
  // Peers read our share above; we may overwrite it only after they are done.
  return group_->Barrier(rank_);
}

float* CpuBackend::GradsInPlace() { return group_->size() == 1 ? group_->grads(rank_) : nullptr; }

float* CpuBackend::ParamsInPlace() { return group_->size() == 1 ? group_->params(rank_) : nullptr; }

absl::StatusOr<bool> CpuBackend::NodeAnyFailed(bool failed) {
  return group_->Vote(rank_, failed);
}

absl::StatusOr<HostBuffer> CpuBackend::AllocHost(uint64_t elems) {
  return HostBuffer(new float[std::max<uint64_t>(elems, 1)], [](float* p) { delete[] p; });
}

absl::Status CpuBackend::ReadParams(Range elems, float* host) {
  std::memcpy(host, group_->params(rank_) + elems.begin, elems.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace zerostate::worker
