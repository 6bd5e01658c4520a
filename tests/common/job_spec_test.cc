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
