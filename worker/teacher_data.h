// Synthetic regression data for the built-in model: inputs x ~ U(-1, 1)^in
// and targets y = tanh(2 T x) for a fixed random sparse teacher T: each
// output reads kTaps inputs (chosen by hash) with weights U(-1, 1) /
// sqrt(kTaps), so a sample costs O(in + out) however wide the model is.
// Every value is a pure function of
// (data_seed, sample index, element), so any rank can produce any sample
// and a reference loop reproduces the exact data order.
// Thread-safe: const after construction.
#pragma once

#include <cstdint>
#include <vector>

#include "zerostate/v1/config.pb.h"

namespace zerostate::worker {

class TeacherData {
 public:
  // REQUIRES: config normalized (worker/config.h).
  explicit TeacherData(const v1::MlpConfig& config);

  // Fills x[n][input_dim] and y[n][output_dim] with samples first .. first+n.
  void Fill(uint64_t first, uint32_t n, float* x, float* y) const;

  uint32_t input_dim() const { return in_; }
  uint32_t output_dim() const { return out_; }

 private:
  static constexpr uint32_t kTaps = 16;
  uint32_t in_, out_;
  uint64_t seed_;
  std::vector<uint32_t> taps_;  // [out][kTaps] input indices
  std::vector<float> teacher_;  // [out][kTaps] weights
};

// The global index of sample `j` of micro-batch `micro` of step `step` on
// global rank `rank`: steps, then micro-batches, then ranks, then samples.
uint64_t SampleIndex(uint64_t step, uint32_t micro, uint32_t rank, uint32_t j,
                     uint32_t grad_accum_steps, uint32_t world, uint32_t micro_batch);

}  // namespace zerostate::worker
