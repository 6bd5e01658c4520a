#include "server/core/optimizer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "common/convert.h"

namespace zerostate::server {
namespace {

template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Aligned64<U>&) const {
    return true;
  }
};
using Floats = std::vector<float, Aligned64<float>>;
using Halves = std::vector<uint16_t, Aligned64<uint16_t>>;

// A block's memory: weights in ±[0.5, 1.5] (away from zero, so a relative
// bound is meaningful), zero moments, as a fresh job starts.
struct Block {
  Floats p, m, v, g;
  Halves lowp;
  v1::DType lowp_dtype = v1::DTYPE_FP32;

  Block(size_t n, v1::DType dtype, std::mt19937* rng)
      : p(n), m(n), v(n), g(n), lowp(n), lowp_dtype(dtype) {
    std::uniform_real_distribution<float> mag(0.5f, 1.5f);
    for (float& x : p) x = (*rng)() & 1 ? mag(*rng) : -mag(*rng);
  }
  // New gradients in [-1, 1], a few exact zeros among them.
  void NewGradients(std::mt19937* rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t i = 0; i < g.size(); ++i) g[i] = i % 11 == 3 ? 0.0f : dist(*rng);
  }
  BlockRefs Refs(v1::OptimizerKind kind) {
    BlockRefs b;
    b.param = p.data();
    b.m = MomentCount(kind) >= 1 ? m.data() : nullptr;
    b.v = MomentCount(kind) >= 2 ? v.data() : nullptr;
    b.grad = g.data();
    b.lowp = lowp_dtype == v1::DTYPE_FP32 ? nullptr : lowp.data();
    b.lowp_dtype = lowp_dtype;
    b.n = p.size();
    return b;
  }
};

struct Case {
  std::string name;
  StepParams params;
};

std::vector<Case> Cases() {
  auto make = [](std::string name, v1::OptimizerKind kind, float lr, float wd, bool nesterov) {
    Case c{std::move(name), {}};
    v1::OptimizerConfig& cfg = c.params.config;
    cfg.set_kind(kind);
    const bool lion = kind == v1::OPTIMIZER_LION;
    cfg.set_beta1(0.9f);
    cfg.set_beta2(lion ? 0.99f : 0.999f);
    cfg.set_eps(1e-8f);
    cfg.set_weight_decay(wd);
    cfg.set_momentum(0.9f);
    cfg.set_nesterov(nesterov);
    c.params.lr = lr;
    c.params.grad_scale = 0.5f;
    return c;
  };
  return {make("adamw", v1::OPTIMIZER_ADAMW, 1e-3f, 0.1f, false),
          make("adam", v1::OPTIMIZER_ADAM, 1e-3f, 0.01f, false),
          make("sgd", v1::OPTIMIZER_SGD_MOMENTUM, 1e-2f, 1e-4f, false),
          make("sgd_nesterov", v1::OPTIMIZER_SGD_MOMENTUM, 1e-2f, 1e-4f, true),
          make("lion", v1::OPTIMIZER_LION, 1e-4f, 0.1f, false)};
}

// One element's step in float64, from the same fp32 state. m_scale and
// v_scale are the sizes of the terms summed into m and v (the L2 term may
// cancel the gradient, b1 * m may cancel (1 - b1) * g): their bounds are
// relative to those sizes, as for any fp32 sum.
struct Ref {
  double p, m, v, m_scale, v_scale;
};

Ref Reference(const StepParams& sp, double p, double g, double m, double v) {
  const v1::OptimizerConfig& c = sp.config;
  const double lr = sp.lr, wd = c.weight_decay(), b1 = c.beta1(), b2 = c.beta2();
  const double t = static_cast<double>(sp.t);
  g *= sp.grad_scale;
  switch (c.kind()) {
    case v1::OPTIMIZER_ADAMW:
    case v1::OPTIMIZER_ADAM: {
      const bool l2 = c.kind() == v1::OPTIMIZER_ADAM;
      if (!l2) p *= 1 - lr * wd;
      const double g_scale = std::abs(g) + (l2 ? std::abs(wd * p) : 0);
      if (l2) g += wd * p;
      const double m_scale = std::abs(b1 * m) + (1 - b1) * g_scale;
      const double v_scale = b2 * v + (1 - b2) * g_scale * g_scale;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double mhat = m / (1 - std::pow(b1, t)), vhat = v / (1 - std::pow(b2, t));
      return {p - lr * mhat / (std::sqrt(vhat) + c.eps()), m, v, m_scale, v_scale};
    }
    case v1::OPTIMIZER_SGD_MOMENTUM: {
      const double m_scale = std::abs(c.momentum() * m) + std::abs(g) + std::abs(wd * p);
      g += wd * p;
      m = c.momentum() * m + g;
      const double d = c.nesterov() ? g + c.momentum() * m : m;
      return {p - lr * d, m, v, m_scale, 0};
    }
    default: {  // Lion
      const double u = b1 * m + (1 - b1) * g;
      const double sign = u > 0 ? 1 : u < 0 ? -1 : 0;
      const double m_scale = std::abs(b2 * m) + std::abs((1 - b2) * g);
      return {p * (1 - lr * wd) - lr * sign, b2 * m + (1 - b2) * g, v, m_scale, 0};
    }
  }
}

constexpr double kRelTol = 1e-6;

// Counts elements off the reference by more than kRelTol, printing the first few.
int CheckAgainstReference(const std::string& what, const Block& before, const Block& after,
                          const StepParams& sp) {
  const int moments = MomentCount(sp.config.kind());
  int bad = 0;
  for (size_t i = 0; i < before.p.size(); ++i) {
    const Ref r = Reference(sp, before.p[i], before.g[i], before.m[i], before.v[i]);
    const bool p_ok = std::abs(after.p[i] - r.p) <= kRelTol * std::abs(r.p);
    const bool m_ok = moments < 1 || std::abs(after.m[i] - r.m) <= kRelTol * r.m_scale;
    const bool v_ok = moments < 2 || std::abs(after.v[i] - r.v) <= kRelTol * r.v_scale;
    if (p_ok && m_ok && v_ok) continue;
    if (++bad <= 5) {
      ADD_FAILURE() << what << " t=" << sp.t << " [" << i << "] p " << after.p[i] << " vs " << r.p
                    << ", m " << after.m[i] << " vs " << r.m << ", v " << after.v[i] << " vs "
                    << r.v;
    }
  }
  return bad;
}

constexpr size_t kOddLength = 1037;  // 64 * 16 + 13: body and a tail for every width
constexpr int kSteps = 5;

TEST(OptimizerTest, EveryIsaMatchesFloat64ReferenceOverSteps) {
  for (const Case& c : Cases()) {
    for (Isa isa : SupportedIsas()) {
      std::mt19937 rng(42);
      Block block(kOddLength, v1::DTYPE_BF16, &rng);
      StepParams sp = c.params;
      const std::string what = c.name + "/" + std::string(IsaName(isa));
      for (sp.t = 1; sp.t <= kSteps; ++sp.t) {
        block.NewGradients(&rng);
        const Block before = block;
        StepBlock(isa, sp, block.Refs(sp.config.kind()));
        ASSERT_EQ(CheckAgainstReference(what, before, block, sp), 0);
      }
    }
  }
}

// Steps copies of one block with every ISA; all must give the same bits.
TEST(OptimizerTest, AllIsasAreBitIdentical) {
  for (const Case& c : Cases()) {
    for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16, v1::DTYPE_FP16}) {
      for (size_t n : {1, 7, 8, 15, 16, 17, 31, 33, 100, 1037}) {
        std::mt19937 rng(n);
        const Block start(n, dtype, &rng);
        std::vector<Block> out(SupportedIsas().size(), start);
        StepParams sp = c.params;
        for (sp.t = 1; sp.t <= 3; ++sp.t) {
          Block grads = start;
          grads.NewGradients(&rng);
          for (size_t k = 0; k < out.size(); ++k) {
            out[k].g = grads.g;
            StepBlock(SupportedIsas()[k], sp, out[k].Refs(sp.config.kind()));
          }
        }
        for (size_t k = 1; k < out.size(); ++k) {
          const std::string what = c.name + " " + v1::DType_Name(dtype) +
                                   " n=" + std::to_string(n) + " " +
                                   std::string(IsaName(SupportedIsas()[k])) + " vs scalar";
          EXPECT_EQ(std::memcmp(out[k].p.data(), out[0].p.data(), n * 4), 0) << what << ": p";
          EXPECT_EQ(std::memcmp(out[k].m.data(), out[0].m.data(), n * 4), 0) << what << ": m";
          EXPECT_EQ(std::memcmp(out[k].v.data(), out[0].v.data(), n * 4), 0) << what << ": v";
          EXPECT_EQ(std::memcmp(out[k].lowp.data(), out[0].lowp.data(), n * 2), 0)
              << what << ": lowp";
        }
      }
    }
  }
}

TEST(OptimizerTest, LowPrecisionCopyIsEncodeOfNewWeights) {
  for (const Case& c : Cases()) {
    for (v1::DType dtype : {v1::DTYPE_BF16, v1::DTYPE_FP16}) {
      for (Isa isa : SupportedIsas()) {
        std::mt19937 rng(3);
        Block block(kOddLength, dtype, &rng);
        block.NewGradients(&rng);
        StepBlock(isa, c.params, block.Refs(c.params.config.kind()));
        Halves want(kOddLength);
        EncodeFloats(Isa::kScalar, block.p.data(), kOddLength, dtype, want.data());
        EXPECT_EQ(block.lowp, want)
            << c.name << " " << v1::DType_Name(dtype) << " " << IsaName(isa);
      }
    }
  }
}

// Non-temporal stores need an aligned copy; a misaligned one (outside the
// contract, but cheap to honour) takes plain stores and the same values.
TEST(OptimizerTest, MisalignedLowPrecisionCopyGetsTheSameBits) {
  const StepParams sp = Cases().front().params;
  for (Isa isa : SupportedIsas()) {
    std::mt19937 rng(17);
    Block aligned(kOddLength, v1::DTYPE_BF16, &rng);
    aligned.NewGradients(&rng);
    Block shifted = aligned;
    Halves out(kOddLength + 1, 0);
    BlockRefs refs = shifted.Refs(v1::OPTIMIZER_ADAMW);
    refs.lowp = out.data() + 1;
    StepBlock(isa, sp, aligned.Refs(v1::OPTIMIZER_ADAMW));
    StepBlock(isa, sp, refs);
    EXPECT_EQ(std::memcmp(out.data() + 1, aligned.lowp.data(), kOddLength * 2), 0) << IsaName(isa);
  }
}

// Out of place (BlockRefs::from_param): the new state written to other
// memory is bit for bit the in-place step's, and the state it was read
// from is left as it was; aligned (non-temporal stores) or shifted by one
// element (plain stores), every rule, copy dtype and ISA, with a tail.
TEST(OptimizerTest, OutOfPlaceStepIsTheInPlaceStepAndLeavesItsSourceAlone) {
  for (const Case& c : Cases()) {
    const v1::OptimizerKind kind = c.params.config.kind();
    for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
      for (size_t shift : {0, 1}) {
        for (Isa isa : SupportedIsas()) {
          const std::string what = c.name + " " + v1::DType_Name(dtype) +
                                   " shift=" + std::to_string(shift) + " " +
                                   std::string(IsaName(isa));
          std::mt19937 rng(5);
          Block in_place(kOddLength + 1, dtype, &rng);
          in_place.NewGradients(&rng);
          for (size_t i = 0; i < in_place.m.size(); ++i) {  // moments of an earlier step
            in_place.m[i] = 0.01f * static_cast<float>(i % 7);
            in_place.v[i] = 0.001f * static_cast<float>(i % 5);
          }
          const Block source = in_place;
          Block from = in_place, to(kOddLength + 1, dtype, &rng);
          BlockRefs want = in_place.Refs(kind), refs = to.Refs(kind);
          const BlockRefs src = from.Refs(kind);
          for (BlockRefs* r : {&want, &refs}) {
            r->param += shift;
            if (r->m != nullptr) r->m += shift;
            if (r->v != nullptr) r->v += shift;
            if (r->lowp != nullptr) r->lowp = static_cast<uint16_t*>(r->lowp) + shift;
            r->grad = from.g.data() + shift;
            r->n = kOddLength - shift;
          }
          refs.from_param = src.param + shift;
          refs.from_m = src.m == nullptr ? nullptr : src.m + shift;
          refs.from_v = src.v == nullptr ? nullptr : src.v + shift;
          StepBlock(isa, c.params, want);
          StepBlock(isa, c.params, refs);
          const size_t n = kOddLength - shift;
          EXPECT_EQ(std::memcmp(to.p.data() + shift, in_place.p.data() + shift, n * 4), 0)
              << what << ": p";
          if (MomentCount(kind) >= 1) {
            EXPECT_EQ(std::memcmp(to.m.data() + shift, in_place.m.data() + shift, n * 4), 0)
                << what << ": m";
          }
          if (MomentCount(kind) >= 2) {
            EXPECT_EQ(std::memcmp(to.v.data() + shift, in_place.v.data() + shift, n * 4), 0)
                << what << ": v";
          }
          EXPECT_EQ(std::memcmp(to.lowp.data() + shift, in_place.lowp.data() + shift, n * 2), 0)
              << what << ": lowp";
          EXPECT_EQ(from.p, source.p) << what;
          EXPECT_EQ(from.m, source.m) << what;
          EXPECT_EQ(from.v, source.v) << what;
          EXPECT_NE(std::memcmp(to.p.data() + shift, source.p.data() + shift, n * 4), 0)
              << what << ": the step changed nothing";
        }
      }
    }
  }
}

TEST(OptimizerTest, Fp32DtypeWritesNoCopy) {
  const StepParams sp = Cases().front().params;
  for (Isa isa : SupportedIsas()) {
    std::mt19937 rng(19);
    Block block(kOddLength, v1::DTYPE_FP32, &rng);
    block.NewGradients(&rng);
    std::fill(block.lowp.begin(), block.lowp.end(), 0x1234);
    BlockRefs refs = block.Refs(v1::OPTIMIZER_ADAMW);
    refs.lowp = block.lowp.data();  // set, yet FP32 means there is no copy
    StepBlock(isa, sp, refs);
    EXPECT_EQ(block.lowp, Halves(kOddLength, 0x1234)) << IsaName(isa);
  }
}

// Layout padding relies on it: zero weights with zero gradients stay zero.
TEST(OptimizerTest, ZeroStaysZero) {
  for (const Case& c : Cases()) {
    for (Isa isa : SupportedIsas()) {
      std::mt19937 rng(5);
      Block block(kOddLength, v1::DTYPE_BF16, &rng);
      std::fill(block.p.begin(), block.p.end(), 0.0f);
      StepParams sp = c.params;
      for (sp.t = 1; sp.t <= 3; ++sp.t) StepBlock(isa, sp, block.Refs(sp.config.kind()));
      for (size_t i = 0; i < kOddLength; ++i) {
        ASSERT_EQ(block.p[i], 0.0f) << c.name << " " << IsaName(isa) << " [" << i << "]";
        ASSERT_EQ(block.m[i], 0.0f) << c.name << " " << IsaName(isa) << " [" << i << "]";
        ASSERT_EQ(block.v[i], 0.0f) << c.name << " " << IsaName(isa) << " [" << i << "]";
        ASSERT_EQ(block.lowp[i], 0) << c.name << " " << IsaName(isa) << " [" << i << "]";
      }
    }
  }
}

TEST(OptimizerTest, LionSignOfZeroIsZero) {
  StepParams sp = Cases().back().params;
  sp.config.set_weight_decay(0);
  for (Isa isa : SupportedIsas()) {
    std::mt19937 rng(9);
    Block block(33, v1::DTYPE_FP32, &rng);
    const Floats p0 = block.p;
    StepBlock(isa, sp, block.Refs(v1::OPTIMIZER_LION));  // g = 0, m = 0: c = 0
    EXPECT_EQ(block.p, p0) << IsaName(isa);
  }
}

TEST(OptimizerTest, TrafficPassAddsGradientAndRewritesMoments) {
  for (Isa isa : SupportedIsas()) {
    std::mt19937 rng(13);
    Block block(kOddLength, v1::DTYPE_BF16, &rng);
    block.NewGradients(&rng);
    std::fill(block.m.begin(), block.m.end(), 0.25f);
    const Block before = block;
    TrafficPass(isa, block.Refs(v1::OPTIMIZER_ADAMW));
    Halves want(kOddLength);
    EncodeFloats(Isa::kScalar, block.p.data(), kOddLength, v1::DTYPE_BF16, want.data());
    for (size_t i = 0; i < kOddLength; ++i) {
      ASSERT_EQ(block.p[i], before.p[i] + before.g[i]) << IsaName(isa) << " [" << i << "]";
    }
    EXPECT_EQ(block.m, before.m) << IsaName(isa);
    EXPECT_EQ(block.v, before.v) << IsaName(isa);
    EXPECT_EQ(block.lowp, want) << IsaName(isa);
  }
}

TEST(OptimizerTest, MomentCount) {
  EXPECT_EQ(MomentCount(v1::OPTIMIZER_ADAMW), 2);
  EXPECT_EQ(MomentCount(v1::OPTIMIZER_ADAM), 2);
  EXPECT_EQ(MomentCount(v1::OPTIMIZER_SGD_MOMENTUM), 1);
  EXPECT_EQ(MomentCount(v1::OPTIMIZER_LION), 1);
  EXPECT_EQ(MomentCount(v1::OPTIMIZER_UNSPECIFIED), 0);
}

}  // namespace
}  // namespace zerostate::server
