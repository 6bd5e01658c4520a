#include "worker/config.h"

#include <gtest/gtest.h>

namespace zerostate::worker {
namespace {

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  ASSERT_FALSE(s.ok()) << "accepted a config with a bad " << field;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(field), std::string::npos) << s;
}

void ExpectNormalizeRejects(const std::string& text, const std::string& field,
                            uint32_t world = 4) {
  auto c = ParseTextConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectInvalid(NormalizeConfig(*c, world).status(), field);
}

TEST(ConfigTest, ExampleTextprotoLoadsAndNormalizes) {
  auto loaded = LoadConfigFile(ZEROSTATE_SOURCE_DIR "/configs/mlp.textproto");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->warnings.empty());
  auto c = NormalizeConfig(loaded->config, 4);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train().job_id(), "mlp-demo");
  EXPECT_EQ(c->train().global_batch_size(), 32u * 2 * 4);
  EXPECT_EQ(c->train().model().hidden_size(), 3);
  EXPECT_EQ(c->train().lr().decay_steps(), 180u);
}

TEST(ConfigTest, EmptyConfigGetsDefaults) {
  auto c = NormalizeConfig(v1::WorkerConfig(), 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train().job_id(), "mlp");
  EXPECT_EQ(c->train().micro_batch_size(), 16u);
  EXPECT_EQ(c->train().optimizer().kind(), v1::OPTIMIZER_ADAMW);
  EXPECT_EQ(c->train().grad_dtype(), v1::DTYPE_FP32);
  EXPECT_EQ(c->train().grad_accum_dtype(), v1::DTYPE_FP32);
  EXPECT_FLOAT_EQ(c->train().lr().lr(), 1e-3f);
  EXPECT_FLOAT_EQ(c->train().loss_scaling().initial_scale(), 65536.0f);
  EXPECT_EQ(c->cluster().metrics_port(), 9470u);
}

TEST(ConfigTest, PrecisionPicksGradDType) {
  auto c = NormalizeConfig(*ParseTextConfig("train { precision: PRECISION_BF16 }"), 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train().grad_dtype(), v1::DTYPE_BF16);
}

TEST(ConfigTest, UnknownTextFieldIsNamedWithItsLine) {
  auto c = ParseTextConfig("train {\n  bogus_field: 3\n}\n");
  ExpectInvalid(c.status(), "bogus_field");
  EXPECT_NE(c.status().message().find("line 2"), std::string::npos) << c.status();
}

TEST(ConfigTest, MissingFileIsNotFound) {
  auto c = LoadConfigFile("/nonexistent/worker.textproto");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/worker.textproto"), std::string::npos);
}

TEST(ConfigTest, EachBadFieldIsNamed) {
  ExpectNormalizeRejects("train { global_batch_size: 100 micro_batch_size: 8 }", "train.global_batch_size");
  ExpectNormalizeRejects("train { model { hidden: [4, 0] } }", "train.model.hidden[1]");
  ExpectNormalizeRejects("train { lr { lr: -1 } }", "train.lr.lr");
  ExpectNormalizeRejects("train { lr { lr: 0.1 warmup_start_lr: -1 } }", "train.lr.warmup_start_lr");
  ExpectNormalizeRejects("train { lr { lr: 0.1 min_lr: 0.5 } }", "train.lr.min_lr");
  ExpectNormalizeRejects("train { gradient_clipping: -1 }", "train.gradient_clipping");
  ExpectNormalizeRejects("train { grad_dtype: DTYPE_FP16 }", "train.grad_dtype");
  ExpectNormalizeRejects("train { grad_accum_dtype: DTYPE_BF16 }", "train.grad_accum_dtype");
  ExpectNormalizeRejects("train { loss_scaling { initial_scale: -2 } }", "train.loss_scaling.initial_scale");
  ExpectNormalizeRejects("train { loss_scaling { growth_factor: 0.5 } }", "train.loss_scaling.growth_factor");
  ExpectNormalizeRejects("train { loss_scaling { backoff_factor: 2 } }", "train.loss_scaling.backoff_factor");
  ExpectNormalizeRejects("train { loss_scaling { min_scale: 1e9 } }", "train.loss_scaling.min_scale");
  ExpectNormalizeRejects("train { model { activation: 7 } }", "train.model.activation");
  ExpectNormalizeRejects("train { lr { decay: 9 } }", "train.lr.decay");
  ExpectNormalizeRejects("train { precision: 9 }", "train.precision");
  ExpectNormalizeRejects("cluster { metrics_port: 70000 }", "cluster.metrics_port");
  ExpectNormalizeRejects("train { precision: PRECISION_FP16 delayed_update { enabled: true } }",
                         "train.delayed_update.enabled");
  ExpectNormalizeRejects("train { speculative_step: true delayed_update { enabled: true } }",
                         "train.delayed_update.enabled");
  ExpectInvalid(NormalizeConfig(v1::WorkerConfig(), 0).status(), "world_size");
}

TEST(ConfigTest, JobTokenComesFromTheEnvironmentOrIsMadeForAOneProcessRun) {
  const std::string given = "token-from-the-environment-0123456789abcdef";
  EXPECT_EQ(*WorkerJobToken(given, 4, 1), given);
  auto made = WorkerJobToken("", 4, 4);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->size(), 64u);
  EXPECT_EQ(made->find_first_not_of("0123456789abcdef"), std::string::npos) << *made;
  EXPECT_NE(*WorkerJobToken("", 1, 1), *made) << "each run makes a fresh token";
  ExpectInvalid(WorkerJobToken("", 4, 2).status(), "ZEROSTATE_JOB_TOKEN: not set, and 2 ranks");
}

}  // namespace
}  // namespace zerostate::worker
