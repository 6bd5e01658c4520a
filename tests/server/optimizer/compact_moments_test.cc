// Compact moments (bf16, int8) against plain references written here: the
// quantizer against a nearest-entry scan over the 8-bit float maps built
// from their definition (values, not bits), and 100 steps of the fused
// kernels against an 8-bit AdamW that decodes, steps and encodes element
// by element, bit-exact on every ISA this machine has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/convert.h"
#include "server/core/aligned_buffer.h"
#include "server/core/optimizer/dispatch.h"
#include "server/core/optimizer/moment_codec.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/optimizer/param_groups.h"
#include "server/core/optimizer/state_convert.h"

namespace zerostate::server {
namespace {

using kernels::QuantMap;

// The smallest binade of each map: 2^-16 (first moment: sign, 4 exponent
// bits, 3 mantissa bits) or 2^-32 (second: 5 exponent bits, 3 mantissa).
int LowestExponent(bool is_signed) { return is_signed ? -16 : -32; }
int Magnitudes(bool is_signed) { return is_signed ? 127 : 255; }

// The map's nonzero magnitudes, in order: entry k (1 <= k <= 127 or 255)
// is 2^(e0 + (k + 1) / 8) * (1 + ((k + 1) % 8) / 8): 8 steps a binade,
// from 1.25 * 2^e0 up to 1.
std::vector<float> ReferenceMagnitudes(bool is_signed) {
  std::vector<float> d(Magnitudes(is_signed) + 1, 0.0f);
  for (int k = 1; k < static_cast<int>(d.size()); ++k) {
    d[k] = static_cast<float>(std::ldexp(1.0 + ((k + 1) % 8) / 8.0,
                                         LowestExponent(is_signed) + (k + 1) / 8));
  }
  return d;
}

// The code of x by its magnitude's nearest nonzero entry (exact distance in
// double, ties to the larger), 0 only below 2^-126 (+-0 and denormals),
// NaN the largest; the signed map adds x's sign as bit 7.
uint8_t ReferenceCode(const std::vector<float>& mags, bool is_signed, float x) {
  const float a = std::abs(x);
  size_t k = 0;
  if (std::isnan(a)) {
    k = mags.size() - 1;
  } else if (a >= std::numeric_limits<float>::min()) {
    k = std::lower_bound(mags.begin() + 1, mags.end(), a) - mags.begin();
    if (k == mags.size()) {
      k = mags.size() - 1;
    } else if (k > 1 && std::abs(double{a} - mags[k - 1]) < std::abs(double{mags[k]} - a)) {
      --k;
    }
  }
  const bool negative = is_signed && std::signbit(x);
  return static_cast<uint8_t>((negative ? 0x80 : 0) | k);
}

float ReferenceValue(const std::vector<float>& mags, bool is_signed, uint8_t code) {
  const float a = mags[is_signed ? code & 0x7f : code];
  return is_signed && (code & 0x80) != 0 ? -a : a;
}

// x in units of its block's scale, by moment_codec.h's rule: times the
// fp32 reciprocal of the scale, or divided where that reciprocal is not
// finite; 0 for a scale of 0.
float ReferenceUnit(float x, float scale) {
  if (scale == 0) return 0.0f;
  const float inv = 1.0f / scale;
  return std::isfinite(inv) ? x * inv : x / scale;
}

float ReferenceScale(const float* x, size_t n) {
  float absmax = 0;
  for (size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::abs(x[i]));
  return absmax;
}

const QuantMap& MapOf(bool is_signed) {
  return is_signed ? kernels::SignedMap() : kernels::UnsignedMap();
}

TEST(QuantMapTest, MapsAreEightBitFloats) {
  for (bool is_signed : {true, false}) {
    const std::vector<float> mags = ReferenceMagnitudes(is_signed);
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const float want = ReferenceValue(mags, is_signed, code);
      const float got = kernels::MapValue(MapOf(is_signed), code);
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << is_signed << " [" << c << "] " << got;
    }
    EXPECT_EQ(mags.back(), 1.0f);
  }
}

// Values at, just above and just below every midpoint (the ties), the
// entries, zeros, denormals, values below the smallest entry, NaN.
std::vector<float> Probes(bool is_signed, int random, uint32_t seed) {
  const std::vector<float> mags = ReferenceMagnitudes(is_signed);
  std::vector<float> xs = {0.0f, 1.0f, 1e-40f, std::numeric_limits<float>::denorm_min(), 1e-7f,
                           5e-7f, 1e-12f, mags[1] / 2, mags[1] * 0.9f};
  for (size_t j = 1; j + 1 < mags.size(); ++j) {
    const float mid = static_cast<float>((double{mags[j]} + mags[j + 1]) / 2);
    for (float x : {mid, std::nextafter(mid, 2.0f), std::nextafter(mid, 0.0f), mags[j]}) {
      xs.push_back(x);
    }
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < random; ++i) xs.push_back(unit(rng) * std::pow(10.0f, -(i % 12)));
  if (is_signed) {
    const size_t n = xs.size();
    for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  }
  return xs;
}

TEST(QuantMapTest, NearestEntryAsTheReference) {
  for (bool is_signed : {true, false}) {
    const std::vector<float> mags = ReferenceMagnitudes(is_signed);
    std::vector<float> xs = Probes(is_signed, 20000, 3);
    xs.push_back(std::numeric_limits<float>::quiet_NaN());
    int bad = 0;
    for (float x : xs) {
      const uint8_t got = kernels::QuantizeUnit(MapOf(is_signed), x);
      const uint8_t want = ReferenceCode(mags, is_signed, x);
      if (got != want && ++bad <= 5) {
        ADD_FAILURE() << (is_signed ? "signed" : "unsigned") << " x=" << x << " code " << +got
                      << ", want " << +want;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// Every ISA's vector quantizer gives QuantizeUnit's code, ties included:
// each block holds 1 (its scale, so x * (1 / scale) is x itself) and the
// probes; and its decoder gives MapValue(code) * scale for every code.
TEST(QuantMapTest, EveryIsaQuantizesAsQuantizeUnit) {
  for (bool is_signed : {true, false}) {
    const QuantMap& map = MapOf(is_signed);
    const std::vector<float> xs = Probes(is_signed, 4000, 5);
    for (Isa isa : SupportedIsas()) {
      int bad = 0;
      for (size_t t = 0; t < xs.size(); t += kQuantBlock - 1) {
        std::vector<float> block = {1.0f};
        block.insert(block.end(), xs.begin() + t, xs.begin() + std::min(xs.size(), t + kQuantBlock - 1));
        std::vector<uint8_t> codes(block.size());
        ASSERT_EQ(kernels::KernelsFor(isa).quantize(map, block.data(), block.size(), codes.data()),
                  1.0f);
        for (size_t i = 0; i < block.size(); ++i) {
          const uint8_t want = kernels::QuantizeUnit(map, block[i]);
          if (codes[i] != want && ++bad <= 5) {
            ADD_FAILURE() << IsaName(isa) << (is_signed ? " signed" : " unsigned") << " x="
                          << block[i] << " code " << +codes[i] << ", want " << +want;
          }
        }
      }
      EXPECT_EQ(bad, 0) << IsaName(isa);
    }
  }
}

// Decoding a block's codes gives each value within half a step of its
// binade (1/16 of the value: 3 mantissa bits), or, below the smallest
// entry, within that entry, times the scale.
TEST(QuantMapTest, BlockRoundTripWithinHalfAStep) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool is_signed : {true, false}) {
    const QuantMap& map = MapOf(is_signed);
    const float smallest = ReferenceMagnitudes(is_signed)[1];
    for (size_t n : {size_t{1}, size_t{7}, size_t{kQuantBlock}}) {
      for (float magnitude : {1e-30f, 1e-3f, 1.0f, 1e30f}) {
        std::vector<float> x(n), back(n);
        for (size_t i = 0; i < n; ++i) {
          // Squares reach far below the block's largest value.
          const float e = normal(rng);
          x[i] = magnitude * (is_signed ? e * std::abs(e) * e : e * e * e * e);
        }
        std::vector<uint8_t> codes(n);
        const float scale = kernels::QuantizeBlock(map, x.data(), n, codes.data());
        ASSERT_EQ(scale, ReferenceScale(x.data(), n));
        kernels::DequantizeBlock(map, codes.data(), n, scale, back.data());
        for (size_t i = 0; i < n; ++i) {
          // Plus the roundings of x / scale and map[code] * scale.
          const double bound = std::max(std::abs(double{x[i]}) / 16, double{smallest} * scale) +
                               std::ldexp(scale, -22);
          ASSERT_LE(std::abs(double{back[i]} - x[i]), bound)
              << "n=" << n << " magnitude " << magnitude << " [" << i << "] " << x[i];
          ASSERT_EQ(back[i] == 0, x[i] == 0 || std::abs(x[i] / scale) < std::numeric_limits<float>::min())
              << "[" << i << "] " << x[i];
        }
      }
    }
  }
}

TEST(QuantMapTest, EveryIsaDequantizesAsMapValue) {
  std::vector<uint8_t> codes(256 + 9);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7);
  for (bool is_signed : {true, false}) {
    const QuantMap& map = MapOf(is_signed);
    for (Isa isa : SupportedIsas()) {
      std::vector<float> back(codes.size());
      kernels::KernelsFor(isa).dequantize(map, codes.data(), codes.size(), 3.0f, back.data());
      for (size_t i = 0; i < codes.size(); ++i) {
        const float want = kernels::MapValue(map, codes[i]) * 3.0f;
        ASSERT_EQ(std::memcmp(&back[i], &want, 4), 0) << IsaName(isa) << " code " << +codes[i];
      }
    }
  }
}

// A block that holds a NaN (whatever its sign and payload), an infinity
// (its reciprocal 0: the vector path, where inf * 0 is a NaN) or a value
// near the largest float (a denormal reciprocal) stores the same scale and
// codes on every ISA as QuantizeBlock, the plain one.
TEST(QuantMapTest, NonFiniteBlocksQuantizeAlikeOnEveryIsa) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        kernels::BitsFloat(0x7f800001u), kernels::BitsFloat(0xffffffffu), 3e38f};
  for (bool is_signed : {true, false}) {
    const QuantMap& map = MapOf(is_signed);
    for (float odd : {nans[0], nans[1], nans[2], nans[3], nans[4], std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      for (size_t at : {size_t{0}, size_t{5}, size_t{37}, size_t{kQuantBlock - 1}}) {
        std::vector<float> x(kQuantBlock);
        for (size_t i = 0; i < x.size(); ++i) x[i] = (is_signed && i % 3 == 0 ? -1.0f : 1.0f) * (i % 17) * 1e-3f;
        x[at] = odd;
        std::vector<uint8_t> want(x.size());
        const float want_scale = kernels::QuantizeBlock(map, x.data(), x.size(), want.data());
        for (Isa isa : SupportedIsas()) {
          std::vector<uint8_t> codes(x.size());
          const float scale = kernels::KernelsFor(isa).quantize(map, x.data(), x.size(), codes.data());
          ASSERT_EQ(kernels::FloatBits(scale), kernels::FloatBits(want_scale))
              << IsaName(isa) << " at " << at << " " << odd;
          ASSERT_EQ(codes, want) << IsaName(isa) << " at " << at << " " << odd;
        }
      }
    }
  }
}

TEST(QuantMapTest, ZerosAndDenormals) {
  const QuantMap& map = kernels::SignedMap();
  std::vector<float> zeros = {0.0f, -0.0f, 0.0f}, back(3);
  std::vector<uint8_t> codes(3);
  EXPECT_EQ(kernels::QuantizeBlock(map, zeros.data(), 3, codes.data()), 0.0f);
  kernels::DequantizeBlock(map, codes.data(), 3, 0.0f, back.data());
  for (float b : back) EXPECT_EQ(b, 0.0f);
  // A block of denormals keeps its largest value's scale and sign.
  const float d = std::numeric_limits<float>::denorm_min();
  std::vector<float> tiny = {3 * d, -3 * d, d};
  const float scale = kernels::QuantizeBlock(map, tiny.data(), 3, codes.data());
  EXPECT_EQ(scale, 3 * d);
  kernels::DequantizeBlock(map, codes.data(), 3, scale, back.data());
  EXPECT_EQ(back[0], 3 * d);
  EXPECT_EQ(back[1], -3 * d);
  EXPECT_GT(back[2], 0.0f);
  // Below 2^-126 of its block's scale a value stores 0 (with its sign), at
  // 2^-126 the smallest entry, on every ISA (the vector encoders see top
  // halves only); 32 elements take the two-vector path.
  const float low = std::numeric_limits<float>::min();
  std::vector<float> x(35, 0.5f);
  x[0] = 1.0f;
  x[3] = std::nextafter(low, 0.0f);
  x[4] = -std::nextafter(low, 0.0f);
  x[5] = low;
  x[6] = -low;
  x[33] = x[3];
  x[34] = low;
  for (Isa isa : SupportedIsas()) {
    std::vector<uint8_t> c(x.size());
    EXPECT_EQ(kernels::KernelsFor(isa).quantize(map, x.data(), x.size(), c.data()), 1.0f);
    EXPECT_EQ(c[3], 0) << IsaName(isa);
    EXPECT_EQ(c[4], 0x80) << IsaName(isa);
    EXPECT_EQ(c[5], 1) << IsaName(isa);
    EXPECT_EQ(c[6], 0x81) << IsaName(isa);
    EXPECT_EQ(c[33], 0) << IsaName(isa);
    EXPECT_EQ(c[34], 1) << IsaName(isa);
  }
}

// --- 100 steps against a reference 8-bit AdamW ---

struct Codes {
  std::vector<uint8_t> m, v;
  std::vector<float> m_scale, v_scale;
};

// The reference: per quantization block, decode by the maps' values, AdamW
// in the kernels' fp32 operation order (rules.h), encode by the nearest scan.
void ReferenceAdamW8bit(const std::vector<std::pair<size_t, StepParams>>& runs, size_t n,
                        std::vector<float>* p, const std::vector<float>& g, Codes* c,
                        std::vector<uint16_t>* lowp) {
  const std::vector<float> smap = ReferenceMagnitudes(true), umap = ReferenceMagnitudes(false);
  for (size_t t = 0; t < n; t += kQuantBlock) {
    const size_t len = std::min<size_t>(kQuantBlock, n - t), q = t / kQuantBlock;
    std::vector<float> m(len), v(len);
    for (size_t i = 0; i < len; ++i) {
      m[i] = ReferenceValue(smap, true, c->m[t + i]) * c->m_scale[q];
      v[i] = ReferenceValue(umap, false, c->v[t + i]) * c->v_scale[q];
    }
    for (size_t i = 0; i < len; ++i) {
      size_t r = 0;
      while (r + 1 < runs.size() && runs[r + 1].first <= t + i) ++r;
      const StepParams& sp = runs[r].second;
      const double b1 = sp.config.beta1(), b2 = sp.config.beta2(), lr = sp.lr;
      const double wd = sp.config.weight_decay(), tt = static_cast<double>(sp.t);
      const float decay = static_cast<float>(1.0 - lr * wd);
      const float omb1 = static_cast<float>(1.0 - b1), omb2 = static_cast<float>(1.0 - b2);
      const float step_size = static_cast<float>(lr / (1.0 - std::pow(b1, tt)));
      const float inv_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(b2, tt)));
      float& pi = (*p)[t + i];
      const float gi = g[t + i] * sp.grad_scale;
      pi = pi * decay;
      m[i] = sp.config.beta1() * m[i] + omb1 * gi;
      v[i] = sp.config.beta2() * v[i] + omb2 * (gi * gi);
      const float denom = std::sqrt(v[i]) * inv_bc2 + sp.config.eps();
      pi = pi - step_size * (m[i] / denom);
      (*lowp)[t + i] = FloatToBf16(pi);
    }
    c->m_scale[q] = ReferenceScale(m.data(), len);
    c->v_scale[q] = ReferenceScale(v.data(), len);
    for (size_t i = 0; i < len; ++i) {
      c->m[t + i] = ReferenceCode(smap, true, ReferenceUnit(m[i], c->m_scale[q]));
      c->v[t + i] = ReferenceCode(umap, false, ReferenceUnit(v[i], c->v_scale[q]));
    }
  }
}

StepParams AdamW(float lr, float wd, float beta1) {
  StepParams sp;
  sp.config.set_kind(v1::OPTIMIZER_ADAMW);
  sp.config.set_beta1(beta1);
  sp.config.set_beta2(0.999f);
  sp.config.set_eps(1e-8f);
  sp.config.set_weight_decay(wd);
  sp.lr = lr;
  sp.grad_scale = 0.5f;
  return sp;
}

// Blocks of 1 element, of 2 quantization blocks and a part, and one whose
// second tensor group begins inside a quantization block.
TEST(CompactMomentsTest, HundredStepsMatchReference8BitAdamOnEveryIsa) {
  struct Shape {
    size_t n;
    size_t group_begin;  // 0: one group
  };
  for (const Shape& shape : {Shape{1, 0}, Shape{2 * kQuantBlock + 77, 0},
                             Shape{kQuantBlock + 640, kQuantBlock - 64}}) {
    const size_t n = shape.n;
    const StateLayout layout{static_cast<uint32_t>((n + 63) / 64 * 64), 2, MomentFormat::kInt8};
    std::vector<StepParams> groups = {AdamW(1e-2f, 0.1f, 0.9f), AdamW(3e-3f, 0.0f, 0.8f)};
    const auto n32 = static_cast<uint32_t>(n), begin32 = static_cast<uint32_t>(shape.group_begin);
    std::vector<GroupRun> runs = {{0, n32, 0}};
    std::vector<std::pair<size_t, StepParams>> ref_runs = {{0, groups[0]}};
    if (shape.group_begin != 0) {
      runs = {{0, begin32, 0}, {begin32, n32, 1}};
      ref_runs.push_back({shape.group_begin, groups[1]});
    }
    // The reference once, from the same start and gradients as each ISA.
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> start(n), p(n);
    for (float& x : start) x = normal(rng);
    std::vector<std::vector<float>> grads(100, std::vector<float>(n));
    // The second quantization block's gradients 1e-17 of the others' (its
    // second moment's scale near the smallest normal float).
    for (auto& g : grads) {
      for (size_t i = 0; i < n; ++i) {
        g[i] = i % 13 == 5 ? 0.0f : normal(rng) * (i / kQuantBlock == 1 ? 1e-17f : 1.0f);
      }
    }
    p = start;
    // Moments from random codes and scales (as a restored state).
    Codes c{std::vector<uint8_t>(n), std::vector<uint8_t>(n),
            std::vector<float>(layout.quant_blocks()), std::vector<float>(layout.quant_blocks())};
    for (size_t i = 0; i < n; ++i) {
      c.m[i] = static_cast<uint8_t>(rng());
      c.v[i] = static_cast<uint8_t>(rng());
    }
    for (size_t q = 0; q < c.m_scale.size(); ++q) {
      c.m_scale[q] = 0.01f * static_cast<float>(q + 3);
      c.v_scale[q] = 1e-4f * static_cast<float>(q + 3);
    }
    const Codes start_codes = c;
    std::vector<uint16_t> want_lowp(n);
    for (uint64_t t = 1; t <= 100; ++t) {
      for (auto& [begin, sp] : ref_runs) sp.t = t;
      ReferenceAdamW8bit(ref_runs, n, &p, grads[t - 1], &c, &want_lowp);
    }
    for (Isa isa : SupportedIsas()) {
      const std::string what = "n=" + std::to_string(n) + " " + std::string(IsaName(isa));
      AlignedBuffer<float> state(layout.total_floats()), grad(layout.block_elems);
      AlignedBuffer<uint16_t> lowp(layout.block_elems);
      std::memset(state.data(), 0, state.size() * sizeof(float));
      std::memcpy(state.data(), start.data(), n * sizeof(float));
      BlockRefs refs = StateRefs(layout, state.data());
      std::memcpy(refs.m, start_codes.m.data(), n);
      std::memcpy(refs.v, start_codes.v.data(), n);
      std::copy(start_codes.m_scale.begin(), start_codes.m_scale.end(), refs.m_scale);
      std::copy(start_codes.v_scale.begin(), start_codes.v_scale.end(), refs.v_scale);
      refs.n = n;
      refs.grad = grad.data();
      refs.lowp = lowp.data();
      refs.lowp_dtype = v1::DTYPE_BF16;
      for (uint64_t t = 1; t <= 100; ++t) {
        std::memcpy(grad.data(), grads[t - 1].data(), n * sizeof(float));
        std::vector<StepParams> by_group = groups;
        for (StepParams& sp : by_group) sp.t = t;
        StepBlockRuns(isa, runs, by_group, refs);
      }
      const auto* m = reinterpret_cast<const uint8_t*>(refs.m);
      const auto* v = reinterpret_cast<const uint8_t*>(refs.v);
      int bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const bool same = std::memcmp(&p[i], state.data() + i, 4) == 0 && m[i] == c.m[i] &&
                          v[i] == c.v[i] && lowp.data()[i] == want_lowp[i];
        if (!same && ++bad <= 5) {
          ADD_FAILURE() << what << " [" << i << "] p " << state.data()[i] << " want " << p[i]
                        << ", m code " << +m[i] << " want " << +c.m[i] << ", v code " << +v[i]
                        << " want " << +c.v[i];
        }
      }
      EXPECT_EQ(bad, 0) << what;
      for (size_t q = 0; q < layout.quant_blocks(); ++q) {
        EXPECT_EQ(refs.m_scale[q], c.m_scale[q]) << what << " m scale " << q;
        EXPECT_EQ(refs.v_scale[q], c.v_scale[q]) << what << " v scale " << q;
      }
    }
  }
}

// bf16 moments: each step is the fp32 step from the decoded moments, then
// the moments rounded to nearest even; the same on every ISA.
TEST(CompactMomentsTest, Bf16StepIsFp32StepRounded) {
  const size_t n = kQuantBlock + 333;
  const StateLayout bf16{static_cast<uint32_t>((n + 63) / 64 * 64), 2, MomentFormat::kBf16};
  const StateLayout fp32{bf16.block_elems, 2, MomentFormat::kFp32};
  for (Isa isa : SupportedIsas()) {
    std::mt19937 rng(13);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    AlignedBuffer<float> state(bf16.total_floats()), wide(fp32.total_floats()),
        grad(bf16.block_elems);
    std::memset(state.data(), 0, state.size() * sizeof(float));
    for (size_t i = 0; i < n; ++i) state.data()[i] = normal(rng);
    StepParams sp = AdamW(1e-3f, 0.01f, 0.9f);
    for (sp.t = 1; sp.t <= 5; ++sp.t) {
      for (size_t i = 0; i < n; ++i) grad.data()[i] = normal(rng);
      ConvertState(bf16, state.data(), fp32, wide.data());
      BlockRefs a = StateRefs(bf16, state.data()), b = StateRefs(fp32, wide.data());
      a.n = b.n = n;
      a.grad = b.grad = grad.data();
      StepBlock(isa, sp, a);
      StepBlock(isa, sp, b);
      const auto* m = reinterpret_cast<const uint16_t*>(a.m);
      const auto* v = reinterpret_cast<const uint16_t*>(a.v);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(state.data() + i, wide.data() + i, 4), 0) << IsaName(isa) << i;
        ASSERT_EQ(m[i], FloatToBf16(b.m[i])) << IsaName(isa) << " m[" << i << "]";
        ASSERT_EQ(v[i], FloatToBf16(b.v[i])) << IsaName(isa) << " v[" << i << "]";
      }
    }
  }
}

// Out of place (a speculative step, a tier that does not update in place)
// gives the in-place bits and leaves the source alone.
TEST(CompactMomentsTest, OutOfPlaceIsInPlace) {
  for (MomentFormat format : {MomentFormat::kBf16, MomentFormat::kInt8}) {
    const StateLayout layout{4096, 2, format};
    for (Isa isa : SupportedIsas()) {
      std::mt19937 rng(17);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      AlignedBuffer<float> a(layout.total_floats()), b(layout.total_floats()),
          grad(layout.block_elems);
      std::memset(a.data(), 0, a.size() * sizeof(float));
      std::memset(b.data(), 0, b.size() * sizeof(float));
      for (size_t i = 0; i < layout.block_elems; ++i) a.data()[i] = normal(rng);
      for (size_t i = 0; i < layout.block_elems; ++i) grad.data()[i] = normal(rng);
      StepParams sp = AdamW(1e-3f, 0.01f, 0.9f);
      BlockRefs warm = StateRefs(layout, a.data());
      warm.grad = grad.data();
      StepBlock(isa, sp, warm);  // nonzero moments
      const std::vector<float> source(a.data(), a.data() + a.size());
      BlockRefs out = StateRefs(layout, b.data(), a.data()), in = StateRefs(layout, a.data());
      out.grad = in.grad = grad.data();
      sp.t = 2;
      StepBlock(isa, sp, out);
      EXPECT_EQ(std::memcmp(a.data(), source.data(), a.size() * 4), 0) << IsaName(isa);
      StepBlock(isa, sp, in);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << IsaName(isa);
    }
  }
}

// The single-gradient pass: a step reading one node's bf16 gradient where it
// landed (BlockRefs::grad_bf16) is bit for bit the step on its fp32 widening
// (what a fold into the sum held), for every moment format, ISA and
// optimizer with moments, whole vectors and tails alike.
TEST(SingleGradientPassTest, Bf16GradientStepsAsItsFp32Widening) {
  const size_t n = 2 * kQuantBlock + 77;
  for (MomentFormat format : {MomentFormat::kFp32, MomentFormat::kBf16, MomentFormat::kInt8}) {
    for (v1::OptimizerKind kind : {v1::OPTIMIZER_ADAMW, v1::OPTIMIZER_LION}) {
      const StateLayout layout{static_cast<uint32_t>((n + 63) / 64 * 64),
                               MomentCount(kind), format};
      for (Isa isa : SupportedIsas()) {
        std::mt19937 rng(29);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        AlignedBuffer<float> a(layout.total_floats()), b(layout.total_floats()), wide(n);
        AlignedBuffer<uint16_t> half(n), lowp_a(n), lowp_b(n);
        std::memset(a.data(), 0, a.size() * sizeof(float));
        for (size_t i = 0; i < n; ++i) a.data()[i] = normal(rng);
        std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
        StepParams sp = AdamW(1e-3f, 0.01f, 0.9f);
        sp.config.set_kind(kind);
        for (sp.t = 1; sp.t <= 3; ++sp.t) {
          for (size_t i = 0; i < n; ++i) {
            half.data()[i] = FloatToBf16(normal(rng));
            wide.data()[i] = Bf16ToFloat(half.data()[i]);
          }
          BlockRefs ra = StateRefs(layout, a.data()), rb = StateRefs(layout, b.data());
          ra.n = rb.n = n;
          ra.grad = wide.data();
          rb.grad_bf16 = half.data();
          ra.lowp = lowp_a.data();
          rb.lowp = lowp_b.data();
          ra.lowp_dtype = rb.lowp_dtype = v1::DTYPE_BF16;
          StepBlock(isa, sp, ra);
          StepBlock(isa, sp, rb);
        }
        const std::string what = std::string(IsaName(isa)) + " format " +
                                 std::to_string(static_cast<int>(format)) + " kind " +
                                 std::to_string(kind);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(lowp_a.data(), lowp_b.data(), n * sizeof(uint16_t)), 0) << what;
      }
    }
  }
}

// Every optimizer's int8 step (one moment or two, the first moment's map
// alone for SGD and Lion) gives the scalar kernel's bytes on every ISA,
// over blocks of whole, partial and single quantization blocks and a
// group boundary inside one (at a multiple of 64 elements, as every run of
// StepBlockRuns starts: a vector kernel's copy stores assume it).
TEST(CompactMomentsTest, Int8StepOfEveryOptimizerIsTheSameOnEveryIsa) {
  const size_t n = 3 * kQuantBlock + 45;
  for (v1::OptimizerKind kind : {v1::OPTIMIZER_ADAMW, v1::OPTIMIZER_ADAM,
                                 v1::OPTIMIZER_SGD_MOMENTUM, v1::OPTIMIZER_LION}) {
    const StateLayout layout{static_cast<uint32_t>((n + 63) / 64 * 64), MomentCount(kind),
                             MomentFormat::kInt8};
    std::vector<StepParams> groups = {AdamW(1e-2f, 0.1f, 0.9f), AdamW(3e-3f, 0.0f, 0.8f)};
    for (StepParams& sp : groups) sp.config.set_kind(kind);
    const auto n32 = static_cast<uint32_t>(n), cut = static_cast<uint32_t>(kQuantBlock + 128);
    const std::vector<GroupRun> runs = {{0, cut, 0}, {cut, n32, 1}};
    std::vector<float> want;
    for (Isa isa : SupportedIsas()) {
      std::mt19937 rng(31);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      AlignedBuffer<float> state(layout.total_floats()), grad(layout.block_elems);
      std::memset(state.data(), 0, state.size() * sizeof(float));
      for (size_t i = 0; i < n; ++i) state.data()[i] = normal(rng);
      BlockRefs refs = StateRefs(layout, state.data());
      refs.n = n;
      refs.grad = grad.data();
      for (uint64_t t = 1; t <= 5; ++t) {
        for (size_t i = 0; i < n; ++i) grad.data()[i] = i % 7 == 3 ? 0.0f : normal(rng);
        std::vector<StepParams> by_group = groups;
        for (StepParams& sp : by_group) sp.t = t;
        StepBlockRuns(isa, runs, by_group, refs);
      }
      const std::vector<float> got(state.data(), state.data() + state.size());
      if (want.empty()) {
        want = got;  // the first ISA: scalar
        continue;
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
          << IsaName(isa) << " kind " << kind;
    }
  }
}

TEST(StateLayoutTest, BytesPerParameter) {
  EXPECT_EQ((StateLayout{262144, 2, MomentFormat::kFp32}.bytes_per_param()), 12.0);
  EXPECT_EQ((StateLayout{262144, 2, MomentFormat::kBf16}.bytes_per_param()), 8.0);
  EXPECT_EQ((StateLayout{262144, 2, MomentFormat::kInt8}.bytes_per_param()), 6.0 + 8.0 / 2048);
  EXPECT_EQ((StateLayout{64, 1, MomentFormat::kFp32}.total_floats()), 128u);  // as before
  EXPECT_EQ((StateLayout{64, 2, MomentFormat::kInt8}.total_floats()) % 16, 0u);
}

// int8 to int8 and bf16 to bf16 keep the bits; bf16 to fp32 is exact.
TEST(StateConvertTest, RoundTrips) {
  const StateLayout i8{4096, 2, MomentFormat::kInt8}, h{4096, 2, MomentFormat::kBf16},
      f{4096, 2, MomentFormat::kFp32};
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AlignedBuffer<float> wide(f.total_floats()), a(i8.total_floats()), b(i8.total_floats()),
      c(h.total_floats()), d(h.total_floats()), back(f.total_floats());
  for (size_t i = 0; i < wide.size(); ++i) wide.data()[i] = std::abs(normal(rng));
  for (const StateLayout* l : {&i8, &h}) {
    AlignedBuffer<float>& x = l == &i8 ? a : c;
    AlignedBuffer<float>& y = l == &i8 ? b : d;
    ConvertState(f, wide.data(), *l, x.data());
    ConvertState(*l, x.data(), *l, y.data());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
  }
  ConvertState(h, c.data(), f, back.data());
  for (size_t i = 0; i < f.block_elems; ++i) {
    ASSERT_EQ(back.data()[i], wide.data()[i]) << "master [" << i << "]";
    ASSERT_EQ(back.data()[f.m_offset() + i], Bf16ToFloat(FloatToBf16(wide.data()[f.m_offset() + i])));
  }
}

// --- the AVX512_BF16 variant of the AVX-512 kernels ---

// Where the CPU has AVX512_BF16 and VBMI, KernelsFor(kAvx512) is Avx512Bf16Kernels,
// which the tests above hold to the scalar bits; this holds the plain
// AVX-512 table (used where the CPU lacks it) to the same bits, and both to
// the scalar bf16 copy over a sweep of bit patterns (denormals, which
// vcvtneps2bf16 would flush, NaNs, ties).
class Avx512Bf16KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<Isa> isas = SupportedIsas();
    if (std::find(isas.begin(), isas.end(), Isa::kAvx512) == isas.end() ||
        !kernels::HasAvx512Bf16()) {
      GTEST_SKIP() << "no AVX512_BF16 and AVX512_VBMI on this CPU";
    }
  }
  static const kernels::KernelTable* Tables(int i) {
    const kernels::KernelTable* t[] = {&kernels::ScalarKernels(), &kernels::Avx512Kernels(),
                                       &kernels::Avx512Bf16Kernels()};
    return t[i];
  }
};

TEST_F(Avx512Bf16KernelsTest, BfloatCopyOfEveryBitPatternSweptIsTheScalars) {
  std::vector<uint32_t> bits = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
                                0x807fffff, 0x00400000, 0x00008000, 0x00018000, 0x00800000,
                                0x7f7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                                0x7f800001, 0xff800001, 0x7fffffff, 0x3f808000, 0x3f818000,
                                0x3f807fff, 0x3f808001, 0x7f7f8000};
  for (uint64_t x = 0; x < (1ull << 32); x += 4099) bits.push_back(static_cast<uint32_t>(x));
  bits.resize((bits.size() + 15) / 16 * 16, 0x3f800000u);
  const size_t n = bits.size();
  std::vector<std::vector<uint16_t>> lowp;
  for (int k = 0; k < 3; ++k) {
    AlignedBuffer<float> p(n), g(n), m(n), v(n);
    AlignedBuffer<uint16_t> h(n);
    std::memcpy(p.data(), bits.data(), n * 4);
    std::memset(g.data(), 0, n * 4);  // p + 0: the copy of p itself
    kernels::StepBuffers b;
    b.param = p.data();
    b.m = m.data();
    b.v = v.data();
    b.grad = g.data();
    b.lowp = h.data();
    b.n = n;
    Tables(k)->step[static_cast<int>(kernels::Rule::kTraffic)]
        .grad[0]
        .by_lowp[static_cast<int>(kernels::Lowp::kBf16)](kernels::StepConsts{}, b);
    lowp.emplace_back(h.data(), h.data() + n);
  }
  for (int k = 1; k < 3; ++k) {
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(lowp[k][i], lowp[0][i]) << "table " << k << " bits 0x" << std::hex << bits[i];
    }
  }
}

// The step with bf16 moments, whose AVX512_BF16 table rounds two vectors
// at once (vcvtne2ps2bf16, a denormal in either taking the integer
// rounding), over the same sweep: the copy of each master (p + 0) and the
// moments (m and v of each pattern's top half, written back through the
// rounding) byte for byte the scalar's, from a 64-byte boundary (the
// streamed copy) and from 16 elements past it (the copy stored, not
// streamed, by the pairs).
TEST_F(Avx512Bf16KernelsTest, BfloatPairsOfEveryBitPatternSweptAreTheScalars) {
  std::vector<uint32_t> bits;
  for (uint64_t x = 0; x < (1ull << 32); x += 4099) bits.push_back(static_cast<uint32_t>(x));
  for (uint32_t b : {0x00000001u, 0x80000001u, 0x007fffffu, 0x00018000u, 0x7f800001u, 0xffc00000u,
                     0x3f808000u, 0x3f818000u, 0x3f807fffu}) {
    bits.push_back(b);
  }
  const size_t n = bits.size();
  for (size_t lo : {size_t{0}, size_t{16}}) {
    std::vector<std::vector<uint16_t>> out;
    for (int k = 0; k < 3; ++k) {
      AlignedBuffer<float> p(n), g(n);
      AlignedBuffer<uint16_t> m(n), v(n), h(n);
      std::memcpy(p.data(), bits.data(), n * 4);
      std::memset(g.data(), 0, n * 4);
      std::memset(h.data(), 0, n * 2);
      for (size_t i = 0; i < n; ++i) {
        m.data()[i] = static_cast<uint16_t>(bits[i] >> 16);
        v.data()[i] = static_cast<uint16_t>(bits[(i + 7) % n] >> 16);
      }
      kernels::CompactBuffers b;
      b.param = p.data();
      b.m = m.data();
      b.v = v.data();
      b.grad = g.data();
      b.lowp = h.data();
      b.n = n;
      const kernels::StepRun run{lo, n, kernels::StepConsts{}};
      const int bf16 = static_cast<int>(kernels::Lowp::kBf16);
      const auto& row = Tables(k)->step[static_cast<int>(kernels::Rule::kTraffic)].grad[0];
      row.compact[static_cast<int>(MomentFormat::kBf16) - 1][bf16](&run, 1, b);
      std::vector<uint16_t> all(h.data(), h.data() + n);
      all.insert(all.end(), m.data(), m.data() + n);
      all.insert(all.end(), v.data(), v.data() + n);
      out.push_back(std::move(all));
    }
    for (int k = 1; k < 3; ++k) {
      for (size_t i = 0; i < out[0].size(); ++i) {
        ASSERT_EQ(out[k][i], out[0][i]) << "table " << k << " from " << lo << " element " << i % n
                                        << " of buffer " << i / n << " bits 0x" << std::hex
                                        << bits[i % n];
      }
    }
  }
}

// Five AdamW steps with each moment format and a bf16 copy, some of the
// master weights denormal: every byte of the state and the copy alike.
TEST_F(Avx512Bf16KernelsTest, AdamWStepsAreThePlainAvx512s) {
  const size_t n = 2 * kQuantBlock + 80;
  for (MomentFormat format : {MomentFormat::kFp32, MomentFormat::kBf16, MomentFormat::kInt8}) {
    const StateLayout layout{static_cast<uint32_t>((n + 63) / 64 * 64), 2, format};
    std::vector<std::vector<uint8_t>> out;
    for (int k = 1; k < 3; ++k) {
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      AlignedBuffer<float> state(layout.total_floats()), grad(layout.block_elems);
      AlignedBuffer<uint16_t> lowp(layout.block_elems);
      std::memset(state.data(), 0, state.size() * sizeof(float));
      for (size_t i = 0; i < n; ++i) state.data()[i] = normal(rng) * (i % 5 == 0 ? 1e-39f : 1.0f);
      BlockRefs refs = StateRefs(layout, state.data());
      kernels::StepConsts c;
      c.lr = 1e-3f;
      c.decay = 1 - 1e-5f;
      c.beta1 = 0.9f;
      c.one_minus_beta1 = 0.1f;
      c.beta2 = 0.999f;
      c.one_minus_beta2 = 1e-3f;
      c.eps = 1e-8f;
      c.step_size = 1e-2f;
      c.inv_bc2_sqrt = 30.0f;
      const auto& row = Tables(k)->step[static_cast<int>(kernels::Rule::kAdamW)].grad[0];
      const int bf16 = static_cast<int>(kernels::Lowp::kBf16);
      for (int t = 0; t < 5; ++t) {
        for (size_t i = 0; i < n; ++i) grad.data()[i] = normal(rng) * 1e-3f;
        if (format == MomentFormat::kFp32) {
          kernels::StepBuffers b;
          b.param = refs.param;
          b.m = refs.m;
          b.v = refs.v;
          b.grad = grad.data();
          b.lowp = lowp.data();
          b.n = n;
          row.by_lowp[bf16](c, b);
        } else {
          kernels::CompactBuffers b;
          b.param = refs.param;
          b.m = refs.m;
          b.v = refs.v;
          b.m_scale = refs.m_scale;
          b.v_scale = refs.v_scale;
          b.grad = grad.data();
          b.lowp = lowp.data();
          b.n = n;
          const kernels::StepRun run{0, n, c};
          row.compact[static_cast<int>(format) - 1][bf16](&run, 1, b);
        }
      }
      std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(state.data()),
                                 reinterpret_cast<const uint8_t*>(state.data() + state.size()));
      bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(lowp.data()),
                   reinterpret_cast<const uint8_t*>(lowp.data() + n));
      out.push_back(std::move(bytes));
    }
    EXPECT_EQ(out[0], out[1]) << "format " << static_cast<int>(format);
  }
}

}  // namespace
}  // namespace zerostate::server
