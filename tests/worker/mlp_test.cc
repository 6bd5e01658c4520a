#include "worker/mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "common/init.h"
#include "worker/teacher_data.h"

namespace zerostate::worker {
namespace {

struct Fixture {
  v1::MlpConfig config;
  Layout layout;
  std::vector<float> params;
  // `wide`: the first hidden layer's width.
  explicit Fixture(v1::Activation act, uint32_t wide = 7) {
    config.set_input_dim(5);
    config.add_hidden(wide);
    config.add_hidden(6);
    config.set_output_dim(3);
    config.set_activation(act);
    config.set_data_seed(3);
    v1::JobSpec spec;
    spec.set_job_id("t");
    for (auto& t : Mlp(config).Tensors()) *spec.add_tensors() = t;
    spec.set_block_elems(128);
    spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
    spec.set_num_nodes(1);
    spec.set_grad_dtype(v1::DTYPE_FP32);
    spec.set_weight_dtype(v1::DTYPE_FP32);
    layout = LayoutOf(*NormalizeJobSpec(spec));
    params.resize(layout.total_elems);
    FillInitialWeights(layout, 9, Range{0, layout.total_elems}, params.data());
    // Non-zero biases, so their gradients are exercised too.
    for (const auto& t : layout.tensors) {
      if (t.shape.size() == 1) for (uint64_t i = 0; i < t.numel; ++i) params[t.offset + i] = 0.05f * (i % 3);
    }
    model = std::make_unique<Mlp>(config);
    model->Bind(layout);
  }
  // Loads samples [first, first + n) into x and y.
  void Load(uint64_t first, uint32_t n) {
    TeacherData data(config);
    x.resize(n * config.input_dim());
    y.resize(n * config.output_dim());
    data.Fill(first, n, x.data(), y.data());
  }
  std::vector<float> Zeros() const { return std::vector<float>(layout.total_elems, 0.0f); }
  std::unique_ptr<Mlp> model;
  std::vector<float> x, y;
};

class MlpGradTest : public ::testing::TestWithParam<v1::Activation> {};

// Central differences in float: agreement to about 1e-2 relative is what
// float precision allows for these step sizes.
TEST_P(MlpGradTest, MatchesFiniteDifferences) {
  Fixture f(GetParam());
  Mlp& model = *f.model;
  const uint32_t batch = 4;
  f.Load(0, batch);
  const auto& x = f.x;
  const auto& y = f.y;
  auto grads = f.Zeros();
  model.ForwardBackward(f.params.data(), x.data(), y.data(), batch, 1.0f, grads.data(), nullptr);
  int checked = 0;
  for (const auto& t : f.layout.tensors) {
    for (uint64_t i = 0; i < t.numel; i += 3) {
      auto numeric = [&](float h) {
        auto p = f.params;
        p[t.offset + i] += h;
        float up = model.Loss(p.data(), x.data(), y.data(), batch);
        p[t.offset + i] -= 2 * h;
        float down = model.Loss(p.data(), x.data(), y.data(), batch);
        return (up - down) / (2 * h);
      };
      const float n1 = numeric(2e-3f), n2 = numeric(1e-3f);
      // A ReLU kink inside the interval makes the two estimates disagree: skip.
      if (std::fabs(n1 - n2) > 1e-3f + 1e-2f * std::fabs(n1)) continue;
      EXPECT_NEAR(grads[t.offset + i], n1, 2e-3f + 2e-2f * std::fabs(n1)) << t.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(Activations, MlpGradTest,
                         ::testing::Values(v1::ACTIVATION_GELU, v1::ACTIVATION_RELU));

TEST(MlpTest, DeterministicAndReportsLayersLastToFirst) {
  Fixture f(v1::ACTIVATION_GELU);
  f.Load(100, 8);
  auto g1 = f.Zeros(), g2 = f.Zeros();
  std::vector<uint64_t> ready;
  float l1 = f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 8, 4.0f, g1.data(),
                                      [&](uint64_t r) { ready.push_back(r); });
  float l2 = f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 8, 4.0f, g2.data(), nullptr);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
  ASSERT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready.back(), 0u);
  EXPECT_GT(ready[0], ready[1]);
  EXPECT_EQ(ready, (std::vector<uint64_t>{f.model->ReadyPoints()[2], f.model->ReadyPoints()[1], 0}));
}

// A layer wider than 64 rows lands and reports in parts: the forward reads
// no weight before `need` covered it (the rest is NaN until then: any read
// would show in the result), and at each `ready(r)` every gradient from r
// up already holds its final bits. The same bits as without either.
TEST(MlpTest, WideLayersLandAndReportInPartsWithTheSameBits) {
  Fixture f(v1::ACTIVATION_GELU, 150);  // rows 0-63, 64-127, 128-149
  f.Load(100, 8);
  auto want = f.Zeros();
  const float want_loss = f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 8,
                                                   4.0f, want.data(), nullptr);
  std::vector<float> landed(f.params.size(), std::nanf(""));
  uint64_t landed_to = 0;
  std::vector<uint64_t> needs;
  auto need = [&](uint64_t end) {
    needs.push_back(end);
    for (; landed_to < end; ++landed_to) landed[landed_to] = f.params[landed_to];
  };
  auto got = f.Zeros();
  std::vector<uint64_t> ready;
  const float loss = f.model->ForwardBackward(
      landed.data(), f.x.data(), f.y.data(), 8, 4.0f, got.data(),
      [&](uint64_t r) {
        EXPECT_EQ(std::memcmp(got.data() + r, want.data() + r, (got.size() - r) * sizeof(float)),
                  0)
            << "gradients from " << r << " up are not final when reported";
        ready.push_back(r);
      },
      need);
  EXPECT_EQ(loss, want_loss);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  const uint64_t w1 = f.model->ReadyPoints()[1], w0 = f.model->ReadyPoints()[0];
  // Layer 0 (150 x 5) reports rows 128, 64 and 0; layer 1 (6 x 150) once.
  EXPECT_EQ(ready, (std::vector<uint64_t>{f.model->ReadyPoints()[2], w1, w0 + 128 * 5,
                                          w0 + 64 * 5, w0}));
  EXPECT_TRUE(std::is_sorted(needs.begin(), needs.end()));
  EXPECT_EQ(needs.front(), w0 + 64 * 5);  // the first 64 rows of layer 0
  EXPECT_GE(needs.size(), 6u);            // 3 parts and a bias, then 2 layers
}

// The first micro-batch of a step writes its gradients over whatever the
// buffer held: the bits of adding them to zeros, every tensor element
// written, the elements between tensors left alone.
TEST(MlpTest, OverwriteWritesWhatAddingToZerosGives) {
  Fixture f(v1::ACTIVATION_RELU, 150);
  f.Load(7, 4);
  auto want = f.Zeros();
  f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 4, 2.0f, want.data(), nullptr);
  std::vector<float> got(want.size(), 7.0f);
  f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 4, 2.0f, got.data(), nullptr,
                           nullptr, /*overwrite=*/true);
  std::vector<bool> in_tensor(got.size(), false);
  for (const auto& t : f.layout.tensors) {
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) in_tensor[i] = true;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (in_tensor[i]) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "element " << i;
    } else {
      ASSERT_EQ(got[i], 7.0f) << "element " << i << " lies between tensors";
    }
  }
}

TEST(MlpTest, LossScaleScalesGradientsOnly) {
  Fixture f(v1::ACTIVATION_RELU);
  f.Load(0, 4);
  auto g1 = f.Zeros(), g8 = f.Zeros();
  float l1 = f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 4, 1.0f, g1.data(), nullptr);
  float l8 = f.model->ForwardBackward(f.params.data(), f.x.data(), f.y.data(), 4, 8.0f, g8.data(), nullptr);
  EXPECT_EQ(l1, l8);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_EQ(g8[i], 8.0f * g1[i]) << i;  // powers of two are exact
}

TEST(TeacherDataTest, SamplesArePureFunctionsOfTheirIndex) {
  v1::MlpConfig c;
  c.set_input_dim(4);
  c.set_output_dim(2);
  c.set_data_seed(5);
  TeacherData d(c);
  std::vector<float> a(3 * 4), ay(3 * 2), b(4), by(2);
  d.Fill(10, 3, a.data(), ay.data());
  d.Fill(12, 1, b.data(), by.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a[8 + i], b[i]);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(ay[4 + i], by[i]);
  EXPECT_EQ(SampleIndex(2, 1, 3, 4, 2, 4, 8), ((2u * 2 + 1) * 4 + 3) * 8 + 4);
}

}  // namespace
}  // namespace zerostate::worker
