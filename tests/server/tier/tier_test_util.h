// Helpers shared by the tier tests: a scratch directory under /tmp and
// deterministic block contents.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "server/core/aligned_buffer.h"
#include "server/core/tier/state_tier.h"

namespace zerostate::server {

// A fresh directory under /tmp, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/zerostate_tier_XXXXXX";
    path_ = mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
  }
  ~ScratchDir() {
    if (path_ != "/tmp") std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Random floats for block b, seeded by (seed, b).
inline AlignedBuffer<float> RandomBlock(const TierShape& shape, uint64_t b, uint64_t seed) {
  AlignedBuffer<float> out(shape.block_floats());
  std::mt19937_64 rng(seed * 1000003 + b);
  std::uniform_real_distribution<float> d(-1, 1);
  for (size_t i = 0; i < out.size(); ++i) out.data()[i] = d(rng);
  return out;
}

// Index of the first float that differs bitwise, or -1.
inline long FirstMismatch(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace zerostate::server
