#include "common/job_spec.h"

#include <gtest/gtest.h>

#include "common/init.h"

namespace zerostate {
namespace {

v1::JobSpec GoodSpec() {
  v1::JobSpec spec;
  spec.set_job_id("job-1");
  auto* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(10);
  w->add_shape(7);
  auto* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(10);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(2);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_block_elems(64);
  return spec;
}

void ExpectInvalid(const v1::JobSpec& spec, const std::string& field) {
  auto r = NormalizeJobSpec(spec);
  ASSERT_FALSE(r.ok()) << "accepted a spec with a bad " << field;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status();
}

TEST(JobSpecTest, NormalizeFillsDefaults) {
  auto spec = GoodSpec();
  spec.clear_block_elems();
  auto r = NormalizeJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->block_elems(), kDefaultBlockElems);
  EXPECT_FLOAT_EQ(r->optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(r->optimizer().beta2(), 0.999f);
  EXPECT_FLOAT_EQ(r->optimizer().eps(), 1e-8f);
}

TEST(JobSpecTest, EachBadFieldIsNamed) {
  auto s = GoodSpec(); s.set_job_id("bad id"); ExpectInvalid(s, "job_id");
  s = GoodSpec(); s.clear_tensors(); ExpectInvalid(s, "tensors");
  s = GoodSpec(); s.mutable_tensors(1)->set_name(""); ExpectInvalid(s, "tensors[1].name");
  s = GoodSpec(); s.mutable_tensors(1)->set_name("w"); ExpectInvalid(s, "tensors[1].name");
  s = GoodSpec(); s.mutable_tensors(0)->set_shape(1, 0); ExpectInvalid(s, "tensors[0].shape[1]");
  s = GoodSpec(); s.mutable_tensors(0)->clear_shape(); ExpectInvalid(s, "tensors[0].shape");
  s = GoodSpec(); s.set_num_nodes(0); ExpectInvalid(s, "num_nodes");
  s = GoodSpec(); s.set_grad_dtype(v1::DTYPE_UNSPECIFIED); ExpectInvalid(s, "grad_dtype");
  s = GoodSpec(); s.set_weight_dtype(static_cast<v1::DType>(9)); ExpectInvalid(s, "weight_dtype");
  s = GoodSpec(); s.set_block_elems(100); ExpectInvalid(s, "block_elems");
  s = GoodSpec(); s.mutable_optimizer()->set_kind(v1::OPTIMIZER_UNSPECIFIED);
  ExpectInvalid(s, "optimizer.kind");
  s = GoodSpec(); s.mutable_optimizer()->set_beta1(1.5f); ExpectInvalid(s, "optimizer.beta1");
  s = GoodSpec(); s.mutable_optimizer()->set_weight_decay(-1); ExpectInvalid(s, "weight_decay");
  s = GoodSpec(); s.set_moment_format(static_cast<v1::MomentFormat>(3));
  ExpectInvalid(s, "moment_format: 3 is not one of");
}

// Every optimizer takes every moment format, kept as given.
TEST(JobSpecTest, EveryOptimizerTakesEveryMomentFormat) {
  for (auto kind : {v1::OPTIMIZER_ADAMW, v1::OPTIMIZER_ADAM, v1::OPTIMIZER_SGD_MOMENTUM,
                    v1::OPTIMIZER_LION}) {
    for (auto format : {v1::MOMENTS_FP32, v1::MOMENTS_BF16, v1::MOMENTS_INT8}) {
      auto s = GoodSpec();
      s.mutable_optimizer()->set_kind(kind);
      s.set_moment_format(format);
      auto r = NormalizeJobSpec(s);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->moment_format(), format);
    }
  }
}

TEST(JobSpecTest, LayoutAlignsTensorsAndPadsToBlocks) {
  auto spec = *NormalizeJobSpec(GoodSpec());
  Layout layout = LayoutOf(spec);
  ASSERT_EQ(layout.tensors.size(), 2u);
  EXPECT_EQ(layout.tensors[0].offset, 0u);
  EXPECT_EQ(layout.tensors[0].numel, 70u);
  EXPECT_EQ(layout.tensors[1].offset, 128u);
  EXPECT_EQ(layout.used_elems, 192u);
  EXPECT_EQ(layout.total_elems, 192u);
  EXPECT_EQ(layout.num_blocks(), 3u);
}

// w: [0, 70), padding [70, 128), b: [128, 138), padding to 192; blocks of 64.
TEST(JobSpecTest, TensorElementsLeaveOutThePadding) {
  Layout layout = LayoutOf(*NormalizeJobSpec(GoodSpec()));
  using V = std::vector<std::pair<uint32_t, uint32_t>>;
  EXPECT_EQ(TensorElements(layout, 0, 64), (V{{0, 64}}));
  EXPECT_EQ(TensorElements(layout, 64, 128), (V{{0, 6}}));
  EXPECT_EQ(TensorElements(layout, 128, 192), (V{{0, 10}}));
  EXPECT_EQ(TensorElements(layout, 60, 140), (V{{0, 10}, {68, 78}}));
  EXPECT_EQ(TensorElements(layout, 70, 128), V{});
}

// GoodSpec plus c [40] at [192, 232) and d [64] at [256, 320): groups
// {b} and {d}, w and c in none.
v1::JobSpec GroupedSpec() {
  v1::JobSpec spec = GoodSpec();
  for (auto [name, n] : {std::pair{"c", 40}, std::pair{"d", 64}}) {
    auto* t = spec.add_tensors();
    t->set_name(name);
    t->add_shape(n);
  }
  spec.add_groups()->add_tensors("b");
  auto* g = spec.add_groups();
  g->add_tensors("d");
  g->set_lr_scale(2);
  g->set_beta2(0.95f);
  return spec;
}

TEST(JobSpecTest, NormalizeFillsEveryGroupValueOnceAndForAll) {
  auto spec = GroupedSpec();
  spec.mutable_optimizer()->set_weight_decay(0.05f);
  auto r = NormalizeJobSpec(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::TensorGroup& g0 = r->groups(0);
  EXPECT_EQ(g0.weight_decay(), 0.05f);
  EXPECT_EQ(g0.lr_scale(), 1.0f);
  EXPECT_EQ(g0.beta1(), 0.9f);
  EXPECT_EQ(g0.beta2(), 0.999f);
  EXPECT_EQ(r->groups(1).lr_scale(), 2.0f);
  EXPECT_EQ(r->groups(1).beta2(), 0.95f);
  auto again = NormalizeJobSpec(*r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(FirstDifference(*again, *r), "");
  // SGD has no betas: a normalized group states none.
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_SGD_MOMENTUM);
  spec.mutable_groups(1)->clear_beta2();
  auto sgd = NormalizeJobSpec(spec);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_FALSE(sgd->groups(0).has_beta1());
  EXPECT_FALSE(sgd->groups(1).has_beta2());
}

TEST(JobSpecTest, GroupRunsCutWhereTheGroupChanges) {
  Layout layout = LayoutOf(*NormalizeJobSpec(GroupedSpec()));
  EXPECT_EQ(layout.tensors[0].group, kNoGroup);
  EXPECT_EQ(layout.tensors[1].group, 1u);
  EXPECT_EQ(layout.tensors[2].group, kNoGroup);
  EXPECT_EQ(layout.tensors[3].group, 2u);
  using R = std::vector<GroupRun>;
  // One group in the range, padding included: one run.
  EXPECT_EQ(GroupRuns(layout, 0, 64), (R{{0, 64, kNoGroup}}));
  EXPECT_EQ(GroupRuns(layout, 64, 128), (R{{0, 64, kNoGroup}}));
  // w's padding joins w; b and its padding, c (no group) from its offset.
  EXPECT_EQ(GroupRuns(layout, 0, 320),
            (R{{0, 128, kNoGroup}, {128, 192, 1}, {192, 256, kNoGroup}, {256, 320, 2}}));
  // A range that starts in padding: the first run takes it.
  EXPECT_EQ(GroupRuns(layout, 232, 300), (R{{0, 68, 2}}));
  EXPECT_EQ(GroupRuns(layout, 100, 200), (R{{0, 92, 1}, {92, 100, kNoGroup}}));
}

TEST(JobSpecTest, FirstDifferenceNamesTheField) {
  auto a = *NormalizeJobSpec(GoodSpec());
  auto b = a;
  EXPECT_EQ(FirstDifference(a, b), "");
  b.mutable_tensors(0)->set_shape(0, 11);
  EXPECT_NE(FirstDifference(a, b).find("shape"), std::string::npos) << FirstDifference(a, b);
}

TEST(JobSpecTest, SeededInitIsIndependentOfHowTheRangeIsCut) {
  auto spec = *NormalizeJobSpec(GoodSpec());
  Layout layout = LayoutOf(spec);
  std::vector<float> whole(layout.total_elems), parts(layout.total_elems);
  FillInitialWeights(layout, 42, Range{0, layout.total_elems}, whole.data());
  FillInitialWeights(layout, 42, Range{0, 77}, parts.data());
  FillInitialWeights(layout, 42, Range{77, layout.total_elems}, parts.data() + 77);
  EXPECT_EQ(whole, parts);
  EXPECT_NE(whole[0], 0.0f);                        // a matrix: uniform
  EXPECT_EQ(whole[128], 0.0f);                      // a vector: zeros
  EXPECT_EQ(whole[100], 0.0f);                      // padding
  float bound = 1.0f / std::sqrt(7.0f);
  for (int i = 0; i < 70; ++i) EXPECT_LE(std::abs(whole[i]), bound);
}

}  // namespace
}  // namespace zerostate
