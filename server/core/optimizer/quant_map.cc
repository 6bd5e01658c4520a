// 8-bit Adam's dynamic quantization maps and their lookup tables.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "server/core/optimizer/moment_codec.h"

namespace zerostate::server::kernels {
namespace {

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7,
// total_bits = 8), in double and rounded once: for i in 0..6, the means of
// adjacent points of linspace(0.1, 1, 2^i + 1) (signed, both signs) or
// linspace(0.1, 1, 2^(i+1) + 1) (unsigned), times 10^(i - 6); then 0 and 1.
std::vector<double> DynamicMap(bool is_signed) {
  std::vector<double> data;
  for (int i = 0; i < 7; ++i) {
    const int items = (is_signed ? (1 << i) : (2 << i)) + 1;
    const double scale = std::pow(10.0, i - 6);
    for (int k = 0; k + 1 < items; ++k) {
      const double a = 0.1 + 0.9 * k / (items - 1), b = 0.1 + 0.9 * (k + 1) / (items - 1);
      data.push_back(scale * (a + b) / 2);
      if (is_signed) data.push_back(-scale * (a + b) / 2);
    }
  }
  data.push_back(0);
  data.push_back(1);
  std::sort(data.begin(), data.end());
  return data;
}

float FloatOfKey(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// REQUIRES: x is no NaN.
int MidsBelow(const QuantMap& m, float x) {
  return static_cast<int>(std::lower_bound(m.mid, m.mid + 255, x) - m.mid);
}

// A map whose lookup needs more than kProbes steps is a programmer bug.
[[noreturn]] void DieProbes(int need) {
  std::fprintf(stderr, "quant_map: a bucket spans %d midpoints (at most %d)\n", need, kProbes);
  std::abort();
}

QuantMap* Build(bool is_signed) {
  auto* m = new QuantMap;
  const std::vector<double> data = DynamicMap(is_signed);
  for (int j = 0; j < 256; ++j) m->value[j] = static_cast<float>(data[j]);
  for (int j = 0; j < 255; ++j) {
    // Exact in double: the two floats are close in magnitude.
    const double exact = (static_cast<double>(m->value[j]) + m->value[j + 1]) / 2;
    float f = static_cast<float>(exact);
    if (static_cast<double>(f) > exact) f = std::nextafter(f, -INFINITY);
    m->mid[j] = f;
  }
  m->mid[255] = m->mid[256] = INFINITY;
  for (int level = 0; level < 8; ++level) {
    for (int r = 0; r < 1 << level; ++r) {
      int path = 0;  // r's bits reversed: node 2^level + path
      for (int k = 0; k < level; ++k) path |= ((r >> k) & 1) << (level - 1 - k);
      m->heap_rev[(1 << level) + r] = m->mid[(2 * path + 1) * (1 << (7 - level)) - 1];
    }
  }
  m->heap_rev[0] = 0;
  for (uint32_t k = 0; k < 65536; ++k) {
    const float first = FloatOfKey(k << 16), last = FloatOfKey((k << 16) | 0xffffu);
    const int lo = std::isnan(first) ? 0 : MidsBelow(*m, first);
    m->lo[k] = static_cast<uint8_t>(lo);
    if (!std::isnan(last) && MidsBelow(*m, last) - lo > kProbes) {
      DieProbes(MidsBelow(*m, last) - lo);
    }
  }
  return m;
}

}  // namespace

const QuantMap& SignedMap() {
  static const QuantMap* map = Build(true);
  return *map;
}

const QuantMap& UnsignedMap() {
  static const QuantMap* map = Build(false);
  return *map;
}

}  // namespace zerostate::server::kernels
