#include "worker/teacher_data.h"

#include <cmath>

namespace zerostate::worker {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// U(-1, 1) from a hash of (seed, a, b).
float Uniform(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t h = Mix(seed ^ Mix(a * 0x100000001b3ull + b));
  return static_cast<float>((static_cast<double>(h >> 11) + 0.5) * 0x1.0p-52 - 1.0);
}

}  // namespace

TeacherData::TeacherData(const v1::MlpConfig& config)
    : in_(config.input_dim()), out_(config.output_dim()), seed_(config.data_seed()) {
  teacher_.resize(size_t{out_} * kTaps);
  taps_.resize(teacher_.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(kTaps));
  for (size_t i = 0; i < teacher_.size(); ++i) {
    teacher_[i] = Uniform(seed_, ~uint64_t{0}, i) * scale;
    taps_[i] = static_cast<uint32_t>(Mix(seed_ ^ Mix(i + 0x5bd1e995ull)) % in_);
  }
}

void TeacherData::Fill(uint64_t first, uint32_t n, float* x, float* y) const {
  for (uint32_t s = 0; s < n; ++s) {
    float* xs = x + size_t{s} * in_;
    for (uint32_t i = 0; i < in_; ++i) xs[i] = Uniform(seed_, first + s, i);
    for (uint32_t o = 0; o < out_; ++o) {
      float acc = 0;
      for (uint32_t j = 0; j < kTaps; ++j) acc += teacher_[size_t{o} * kTaps + j] * xs[taps_[size_t{o} * kTaps + j]];
      y[size_t{s} * out_ + o] = std::tanh(2.0f * acc);
    }
  }
}

uint64_t SampleIndex(uint64_t step, uint32_t micro, uint32_t rank, uint32_t j,
                     uint32_t grad_accum_steps, uint32_t world, uint32_t micro_batch) {
  return ((step * grad_accum_steps + micro) * world + rank) * micro_batch + j;
}

}  // namespace zerostate::worker
