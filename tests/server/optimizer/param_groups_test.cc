// Tensor groups in the fused step: a block whose runs belong to different
// groups steps each run exactly as StepBlock steps it alone with the group's
// parameters (bit for bit, every ISA), and the group parameters follow
// torch.optim's param_groups (checked against a float64 reference of
// torch's AdamW, SGD and Lion updates with a group's own lr and weight decay).
#include "server/core/optimizer/param_groups.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace zerostate::server {
namespace {

struct AlignedFloats {
  explicit AlignedFloats(size_t n)
      : data(static_cast<float*>(::operator new(n * 4, std::align_val_t(64)))), n(n) {
    std::memset(data, 0, n * 4);
  }
  AlignedFloats(const AlignedFloats& o) : AlignedFloats(o.n) { std::memcpy(data, o.data, n * 4); }
  ~AlignedFloats() { ::operator delete(data, std::align_val_t(64)); }
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* data;
  size_t n;
};

// A block's state with a bf16 copy (2 bytes per element after the floats).
struct State {
  explicit State(size_t n) : p(n), m(n), v(n), g(n), lowp(n) {}
  AlignedFloats p, m, v, g, lowp;  // lowp: n floats of room for n bf16 values
  BlockRefs Refs(size_t begin, size_t n) {
    BlockRefs r;
    r.param = p.data + begin;
    r.m = m.data + begin;
    r.v = v.data + begin;
    r.grad = g.data + begin;
    r.lowp = reinterpret_cast<uint16_t*>(lowp.data) + begin;
    r.lowp_dtype = v1::DTYPE_BF16;
    r.n = n;
    return r;
  }
};

v1::JobSpec SpecWithGroups(v1::OptimizerKind kind) {
  v1::JobSpec spec;
  spec.mutable_optimizer()->set_kind(kind);
  spec.mutable_optimizer()->set_beta1(0.9f);
  spec.mutable_optimizer()->set_beta2(0.999f);
  spec.mutable_optimizer()->set_eps(1e-8f);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_optimizer()->set_weight_decay(0.1f);
  const bool betas = kind != v1::OPTIMIZER_SGD_MOMENTUM;
  v1::TensorGroup* no_decay = spec.add_groups();
  no_decay->set_weight_decay(0);
  no_decay->set_lr_scale(1);
  if (betas) no_decay->set_beta1(0.9f), no_decay->set_beta2(0.999f);
  v1::TensorGroup* scaled = spec.add_groups();
  scaled->set_weight_decay(0.05f);
  scaled->set_lr_scale(0.3f);
  if (betas) scaled->set_beta1(0.8f), scaled->set_beta2(0.95f);
  return spec;
}

StepParams Base(const v1::JobSpec& spec, uint64_t t) {
  StepParams p;
  p.config = spec.optimizer();
  p.lr = 1e-2f;
  p.grad_scale = 0.5f;
  p.t = t;
  return p;
}

TEST(ParamGroupsTest, GroupParamsReplaceWeightDecayBetasAndScaleLr) {
  const v1::JobSpec spec = SpecWithGroups(v1::OPTIMIZER_ADAMW);
  const StepParams base = Base(spec, 3);
  const std::vector<StepParams> by = GroupStepParams(spec, base);
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[kNoGroup].lr, base.lr);
  EXPECT_EQ(by[kNoGroup].config.weight_decay(), 0.1f);
  EXPECT_EQ(by[1].config.weight_decay(), 0.0f);
  EXPECT_EQ(by[1].lr, base.lr);
  EXPECT_EQ(by[2].lr, static_cast<float>(static_cast<double>(1e-2f) * static_cast<double>(0.3f)));
  EXPECT_EQ(by[2].config.beta1(), 0.8f);
  EXPECT_EQ(by[2].config.beta2(), 0.95f);
  EXPECT_EQ(by[2].config.eps(), 1e-8f);
  for (const StepParams& p : by) {
    EXPECT_EQ(p.t, 3u);
    EXPECT_EQ(p.grad_scale, 0.5f);
  }
}

// Runs that change group mid-block (on 64-element boundaries, as GroupRuns
// cuts them), the last with a tail for every vector width.
const std::vector<GroupRun> kRuns = {{0, 192, 0}, {192, 256, 1}, {256, 320, 2}, {320, 1037, 1}};

TEST(ParamGroupsTest, EachRunStepsAsStepBlockOfItsGroupAloneOnEveryIsa) {
  for (v1::OptimizerKind kind : {v1::OPTIMIZER_ADAMW, v1::OPTIMIZER_ADAM,
                                 v1::OPTIMIZER_SGD_MOMENTUM, v1::OPTIMIZER_LION}) {
    const v1::JobSpec spec = SpecWithGroups(kind);
    for (Isa isa : SupportedIsas()) {
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> d(-1, 1);
      State runs(1037);
      for (size_t i = 0; i < 1037; ++i) runs.p.data[i] = 1 + d(rng);
      State alone = runs;
      for (uint64_t t = 1; t <= 3; ++t) {
        for (size_t i = 0; i < 1037; ++i) runs.g.data[i] = alone.g.data[i] = d(rng);
        const std::vector<StepParams> by = GroupStepParams(spec, Base(spec, t));
        StepBlockRuns(isa, kRuns, by, runs.Refs(0, 1037));
        for (const GroupRun& r : kRuns) StepBlock(isa, by[r.group], alone.Refs(r.begin, r.end - r.begin));
      }
      const std::string what = v1::OptimizerKind_Name(kind) + " " + std::string(IsaName(isa));
      EXPECT_EQ(std::memcmp(runs.p.data, alone.p.data, 1037 * 4), 0) << what;
      EXPECT_EQ(std::memcmp(runs.m.data, alone.m.data, 1037 * 4), 0) << what;
      EXPECT_EQ(std::memcmp(runs.v.data, alone.v.data, 1037 * 4), 0) << what;
      EXPECT_EQ(std::memcmp(runs.lowp.data, alone.lowp.data, 1037 * 2), 0) << what;
    }
  }
}

TEST(ParamGroupsTest, OneRunIsOneStepBlock) {
  const v1::JobSpec spec = SpecWithGroups(v1::OPTIMIZER_ADAMW);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-1, 1);
  State a(1037);
  for (size_t i = 0; i < 1037; ++i) a.p.data[i] = 1 + d(rng), a.g.data[i] = d(rng);
  State b = a;
  const std::vector<StepParams> by = GroupStepParams(spec, Base(spec, 1));
  StepBlockRuns({{0, 1037, 2}}, by, a.Refs(0, 1037));
  StepBlock(by[2], b.Refs(0, 1037));
  EXPECT_EQ(std::memcmp(a.p.data, b.p.data, 1037 * 4), 0);
  EXPECT_EQ(std::memcmp(a.lowp.data, b.lowp.data, 1037 * 2), 0);
}

// torch.optim with param_groups [{params, lr: lr * lr_scale, weight_decay,
// betas}], one element in float64: AdamW (torch 1.13's _single_tensor_adamw),
// SGD with momentum (dampening 0) and Lion (lion-pytorch).
struct TorchRef {
  double p, m, v;
};
TorchRef TorchStep(v1::OptimizerKind kind, double lr, double wd, double b1, double b2,
                   double eps, double momentum, int t, double p, double g, double m, double v) {
  switch (kind) {
    case v1::OPTIMIZER_ADAMW: {
      p *= 1 - lr * wd;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      const double denom = std::sqrt(v) / std::sqrt(bc2) + eps;
      return {p - lr / bc1 * m / denom, m, v};
    }
    case v1::OPTIMIZER_SGD_MOMENTUM:
      g += wd * p;
      m = t == 1 ? g : momentum * m + g;
      return {p - lr * m, m, v};
    default: {  // Lion
      const double c = b1 * m + (1 - b1) * g;
      p = p * (1 - lr * wd) - lr * (c > 0 ? 1 : c < 0 ? -1 : 0);
      return {p, b2 * m + (1 - b2) * g, v};
    }
  }
}

// Relative 1e-5 on the weights after 5 steps: the fp32 kernel against a
// float64 torch, through a group's scaled lr and its own weight decay.
TEST(ParamGroupsTest, MatchesTorchParamGroupsWithinTolerance) {
  constexpr double kTol = 1e-5;
  for (v1::OptimizerKind kind :
       {v1::OPTIMIZER_ADAMW, v1::OPTIMIZER_SGD_MOMENTUM, v1::OPTIMIZER_LION}) {
    const v1::JobSpec spec = SpecWithGroups(kind);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> d(-1, 1);
    State s(1037);
    std::vector<double> p(1037), m(1037), v(1037);
    for (size_t i = 0; i < 1037; ++i) p[i] = s.p.data[i] = 1 + d(rng);
    for (int t = 1; t <= 5; ++t) {
      for (size_t i = 0; i < 1037; ++i) s.g.data[i] = d(rng);
      const StepParams base = Base(spec, t);
      StepBlockRuns(kRuns, GroupStepParams(spec, base), s.Refs(0, 1037));
      for (const GroupRun& r : kRuns) {
        const v1::OptimizerConfig& o = spec.optimizer();
        const v1::TensorGroup* g = r.group == kNoGroup ? nullptr : &spec.groups(r.group - 1);
        const double lr = 1e-2 * (g ? g->lr_scale() : 1.0);  // torch: a Python float
        const double wd = g ? g->weight_decay() : o.weight_decay();
        const double b1 = g && g->has_beta1() ? g->beta1() : o.beta1();
        const double b2 = g && g->has_beta2() ? g->beta2() : o.beta2();
        for (uint32_t i = r.begin; i < r.end; ++i) {
          const TorchRef ref = TorchStep(kind, lr, wd, b1, b2, o.eps(), o.momentum(), t, p[i],
                                         0.5 * s.g.data[i], m[i], v[i]);
          p[i] = ref.p, m[i] = ref.m, v[i] = ref.v;
        }
      }
    }
    int bad = 0;
    for (size_t i = 0; i < 1037; ++i) {
      if (std::abs(s.p.data[i] - p[i]) <= kTol * std::abs(p[i])) continue;
      if (++bad <= 5) {
        ADD_FAILURE() << v1::OptimizerKind_Name(kind) << " [" << i << "] " << s.p.data[i]
                      << " vs torch " << p[i];
      }
    }
    EXPECT_EQ(bad, 0) << v1::OptimizerKind_Name(kind);
  }
}

}  // namespace
}  // namespace zerostate::server
