#include "common/init.h"

#include <algorithm>
#include <cmath>

namespace zerostate {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), from the top 53 bits of a hash.
double Unit(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }

float ValueOf(const TensorSlot& t, uint64_t key, uint64_t i) {
  uint64_t h = SplitMix64(key ^ SplitMix64(i));
  switch (t.init) {
    case v1::INIT_ZEROS: return 0.0f;
    case v1::INIT_ONES: return 1.0f;
    case v1::INIT_UNIFORM: return static_cast<float>((2.0 * Unit(h) - 1.0) * t.init_scale);
    case v1::INIT_NORMAL: {
      double u1 = Unit(h), u2 = Unit(SplitMix64(h));
      return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2) *
                                t.init_scale);
    }
    default: {  // INIT_DEFAULT: like torch.nn.Linear for matrices, zeros for vectors
      if (t.shape.size() < 2) return 0.0f;
      double fan_in = static_cast<double>(t.numel) / static_cast<double>(t.shape[0]);
      return static_cast<float>((2.0 * Unit(h) - 1.0) / std::sqrt(fan_in));
    }
  }
}

}  // namespace

void FillInitialWeights(const Layout& layout, uint64_t seed, Range elems, float* out) {
  std::fill(out, out + elems.size(), 0.0f);
  for (size_t ti = 0; ti < layout.tensors.size(); ++ti) {
    const TensorSlot& t = layout.tensors[ti];
    uint64_t begin = std::max(elems.begin, t.offset);
    uint64_t end = std::min(elems.end, t.offset + t.numel);
    uint64_t key = SplitMix64(seed * 0x100000001b3ull + ti);
    for (uint64_t e = begin; e < end; ++e) out[e - elems.begin] = ValueOf(t, key, e - t.offset);
  }
}

}  // namespace zerostate
