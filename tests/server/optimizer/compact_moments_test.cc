// Compact moments (bf16, int8) against plain references written here: the
// quantizer against a nearest-entry scan over a map built from 8-bit
// Adam's definition, and 100 steps of the fused kernels against an 8-bit
// AdamW that decodes, steps and encodes element by element, bit-exact on
// every ISA this machine has.
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

// 8-bit Adam's dynamic map (bitsandbytes create_dynamic_map, 7 exponent
// bits), written out again: for exponent i the midpoints of 2^i (signed)
// or 2^(i+1) (unsigned) equal steps of [0.1, 1], times 10^(i-6); 0; 1.
std::vector<float> ReferenceMap(bool is_signed) {
  std::vector<double> d = {0.0, 1.0};
  for (int i = 0; i <= 6; ++i) {
    const int steps = is_signed ? 1 << i : 2 << i;
    for (int k = 0; k < steps; ++k) {
      const double a = 0.1 + 0.9 * k / steps, b = 0.1 + 0.9 * (k + 1) / steps;
      const double x = std::pow(10.0, i - 6) * (a + b) / 2;
      d.push_back(x);
      if (is_signed) d.push_back(-x);
    }
  }
  std::sort(d.begin(), d.end());
  return std::vector<float>(d.begin(), d.end());
}

// The nearest entry by exact distance (double), ties to the lower entry:
// of the first entry not below x and the one before it.
uint8_t ReferenceCode(const std::vector<float>& map, float x) {
  const auto hi = std::lower_bound(map.begin(), map.end(), x) - map.begin();
  if (hi == 0) return 0;
  if (hi == 256) return 255;
  const bool upper = std::abs(double{map[hi]} - x) < std::abs(double{x} - map[hi - 1]);
  return static_cast<uint8_t>(upper ? hi : hi - 1);
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

TEST(QuantMapTest, MapsAreEightBitAdams) {
  for (bool is_signed : {true, false}) {
    const QuantMap& map = is_signed ? kernels::SignedMap() : kernels::UnsignedMap();
    const std::vector<float> want = ReferenceMap(is_signed);
    ASSERT_EQ(want.size(), 256u);
    for (int j = 0; j < 256; ++j) ASSERT_EQ(map.value[j], want[j]) << is_signed << " [" << j << "]";
  }
}

TEST(QuantMapTest, NearestEntryAsTheReference) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (bool is_signed : {true, false}) {
    const QuantMap& map = is_signed ? kernels::SignedMap() : kernels::UnsignedMap();
    const std::vector<float> ref = ReferenceMap(is_signed);
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 1e-40f, -1e-40f,
                             std::numeric_limits<float>::denorm_min(), 1e-7f, 5e-7f};
    for (int j = 0; j < 255; ++j) {  // every midpoint and its neighbours: the ties
      const float mid = static_cast<float>((double{ref[j]} + ref[j + 1]) / 2);
      xs.push_back(mid);
      xs.push_back(std::nextafter(mid, 2.0f));
      xs.push_back(std::nextafter(mid, -2.0f));
    }
    for (int i = 0; i < 20000; ++i) {
      const float x = unit(rng);
      xs.push_back(is_signed ? x : std::abs(x));
      xs.push_back(x * std::pow(10.0f, -static_cast<float>(i % 8)));
    }
    int bad = 0;
    for (float x : xs) {
      if (!is_signed && x < 0) continue;
      const uint8_t got = kernels::QuantizeUnit(map, x), want = ReferenceCode(ref, x);
      if (got != want && ++bad <= 5) {
        ADD_FAILURE() << (is_signed ? "signed" : "unsigned") << " x=" << x << " code " << +got
                      << " (" << ref[got] << "), want " << +want << " (" << ref[want] << ")";
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// Every ISA's vector quantizer gives QuantizeUnit's code, ties included:
// each block holds 1 (its scale, so x * (1 / scale) is x itself) and values
// at and around every midpoint.
TEST(QuantMapTest, EveryIsaQuantizesAsQuantizeUnit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (bool is_signed : {true, false}) {
    const QuantMap& map = is_signed ? kernels::SignedMap() : kernels::UnsignedMap();
    const std::vector<float> ref = ReferenceMap(is_signed);
    std::vector<float> xs;
    for (int j = 0; j < 255; ++j) {
      const float mid = map.mid[j];
      for (float x : {mid, std::nextafter(mid, 2.0f), std::nextafter(mid, -2.0f), ref[j]}) {
        if (is_signed || x >= 0) xs.push_back(x);
      }
    }
    for (int i = 0; i < 4000; ++i) xs.push_back(is_signed ? unit(rng) : std::abs(unit(rng)));
    xs.push_back(0.0f);
    xs.push_back(-0.0f);
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

// Decoding a block's codes gives each value within half the gap between
// the map entries around it, times the scale; the worst case is half the
// widest gap (near 1: 0.9/64/2 signed, 0.9/128/2 unsigned; the signed map
// has no -1, whose nearest entry is as far).
TEST(QuantMapTest, BlockRoundTripWithinHalfAGap) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool is_signed : {true, false}) {
    const QuantMap& map = is_signed ? kernels::SignedMap() : kernels::UnsignedMap();
    const double worst = (is_signed ? 0.9 / 64 : 0.9 / 128) / 2;
    for (size_t n : {size_t{1}, size_t{7}, size_t{kQuantBlock}}) {
      for (float magnitude : {1e-30f, 1e-3f, 1.0f, 1e30f}) {
        std::vector<float> x(n), back(n);
        for (float& e : x) e = magnitude * (is_signed ? normal(rng) : std::abs(normal(rng)));
        std::vector<uint8_t> codes(n);
        const float scale = kernels::QuantizeBlock(map, x.data(), n, codes.data());
        ASSERT_EQ(scale, ReferenceScale(x.data(), n));
        kernels::DequantizeBlock(map, codes.data(), n, scale, back.data());
        for (size_t i = 0; i < n; ++i) {
          // Plus the rounding of map[code] * scale: an ulp of the value.
          ASSERT_LE(std::abs(double{back[i]} - x[i]), worst * scale + std::ldexp(scale, -23))
              << "n=" << n << " magnitude " << magnitude << " [" << i << "] " << x[i];
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
  EXPECT_LT(back[1], 0.0f);
}

// --- 100 steps against a reference 8-bit AdamW ---

struct Codes {
  std::vector<uint8_t> m, v;
  std::vector<float> m_scale, v_scale;
};

// The reference: per quantization block, decode with the map, AdamW in the
// kernels' fp32 operation order (rules.h), encode by the nearest scan.
void ReferenceAdamW8bit(const std::vector<std::pair<size_t, StepParams>>& runs, size_t n,
                        std::vector<float>* p, const std::vector<float>& g, Codes* c,
                        std::vector<uint16_t>* lowp) {
  const std::vector<float> smap = ReferenceMap(true), umap = ReferenceMap(false);
  for (size_t t = 0; t < n; t += kQuantBlock) {
    const size_t len = std::min<size_t>(kQuantBlock, n - t), q = t / kQuantBlock;
    std::vector<float> m(len), v(len);
    for (size_t i = 0; i < len; ++i) {
      m[i] = smap[c->m[t + i]] * c->m_scale[q];
      v[i] = umap[c->v[t + i]] * c->v_scale[q];
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
      c->m[t + i] = ReferenceCode(smap, ReferenceUnit(m[i], c->m_scale[q]));
      c->v[t + i] = ReferenceCode(umap, ReferenceUnit(v[i], c->v_scale[q]));
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
    for (auto& g : grads) {
      for (size_t i = 0; i < n; ++i) g[i] = i % 13 == 5 ? 0.0f : normal(rng);
    }
    p = start;
    Codes c{std::vector<uint8_t>(n), std::vector<uint8_t>(n),
            std::vector<float>(layout.quant_blocks()), std::vector<float>(layout.quant_blocks())};
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

}  // namespace
}  // namespace zerostate::server
