#include "worker/ds_config.h"

#include <utility>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace zerostate::worker {
namespace {

void ExpectRejected(const std::string& json, const std::string& key) {
  auto r = ParseDeepSpeedConfig(json);
  ASSERT_FALSE(r.ok()) << "accepted " << json;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status();
}

bool HasWarning(const LoadedConfig& c, const std::string& key) {
  for (const auto& w : c.warnings) {
    if (w.find(key) != std::string::npos) return true;
  }
  return false;
}

TEST(DsConfigTest, ExampleFileMapsEveryKey) {
  auto r = LoadConfigFile(ZEROSTATE_SOURCE_DIR "/configs/ds_config.json");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& t = r->config.train();
  EXPECT_EQ(t.job_id(), "mlp-ds");
  EXPECT_EQ(t.micro_batch_size(), 32u);
  EXPECT_EQ(t.grad_accum_steps(), 2u);
  EXPECT_EQ(t.global_batch_size(), 256u);
  EXPECT_EQ(t.optimizer().kind(), v1::OPTIMIZER_ADAMW);
  EXPECT_FLOAT_EQ(t.optimizer().beta2(), 0.999f);
  EXPECT_FLOAT_EQ(t.optimizer().weight_decay(), 0.01f);
  EXPECT_FLOAT_EQ(t.lr().lr(), 0.003f);
  EXPECT_EQ(t.lr().warmup_steps(), 20u);
  EXPECT_EQ(t.lr().decay(), v1::LR_DECAY_LINEAR);
  EXPECT_EQ(t.lr().decay_steps(), 180u);
  EXPECT_FLOAT_EQ(t.gradient_clipping(), 1.0f);
  EXPECT_EQ(t.precision(), v1::PRECISION_BF16);
  EXPECT_TRUE(HasWarning(*r, "steps_per_print"));
  EXPECT_TRUE(HasWarning(*r, "zero_optimization.offload_optimizer.pin_memory"));
  EXPECT_TRUE(NormalizeConfig(r->config, 4).ok());
}

TEST(DsConfigTest, Fp16LossScalingIsMapped) {
  auto r = ParseDeepSpeedConfig(R"({"fp16": {"enabled": true, "initial_scale_power": 12,
      "loss_scale_window": 500, "hysteresis": 3, "min_loss_scale": 2}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& ls = r->config.train().loss_scaling();
  EXPECT_EQ(r->config.train().precision(), v1::PRECISION_FP16);
  EXPECT_FLOAT_EQ(ls.initial_scale(), 4096.0f);
  EXPECT_EQ(ls.growth_interval(), 500u);
  EXPECT_EQ(ls.hysteresis(), 3u);
  EXPECT_FLOAT_EQ(ls.min_scale(), 2.0f);
  EXPECT_FALSE(ls.static_scale());
  r = ParseDeepSpeedConfig(R"({"fp16": {"enabled": true, "loss_scale": 128}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->config.train().loss_scaling().static_scale());
}

TEST(DsConfigTest, AdamIsAdamWUnlessAdamWModeIsOff) {
  auto r = ParseDeepSpeedConfig(R"({"optimizer": {"type": "Adam"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.train().optimizer().kind(), v1::OPTIMIZER_ADAMW);
  r = ParseDeepSpeedConfig(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.train().optimizer().kind(), v1::OPTIMIZER_ADAM);
}

TEST(DsConfigTest, WarmupLrWithoutTypeWarnsAboutLinearWarmup) {
  auto r = ParseDeepSpeedConfig(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(HasWarning(*r, "scheduler.params.warmup_type"));
  EXPECT_EQ(r->config.train().lr().decay(), v1::LR_DECAY_NONE);
}

TEST(DsConfigTest, EachUnsupportedKeyOrValueIsNamed) {
  ExpectRejected(R"({"bogus": 1})", "bogus");
  ExpectRejected(R"({"fp16": {"enabled": true, "bogus_scale": 1}})", "fp16.bogus_scale");
  ExpectRejected(R"({"zero_optimization": {"stage_three": 1}, "aio": {"queue_depth": 8}})",
                 "zero_optimization.stage_three");
  ExpectRejected(R"({"optimizer": {"type": "OneBitAdam"}})", "optimizer.type");
  ExpectRejected(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})", "optimizer.params.betas");
  ExpectRejected(R"({"scheduler": {"type": "OneCycle"}})", "scheduler.type");
  ExpectRejected(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "log"}}})",
                 "scheduler.params.warmup_type");
  ExpectRejected(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10,
      "total_num_steps": 5, "warmup_type": "linear"}}})", "scheduler.params.total_num_steps");
  ExpectRejected(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "fp16.enabled");
  ExpectRejected(R"({"fp16": {"enabled": true, "loss_scale": -1}})", "fp16.loss_scale");
  ExpectRejected(R"({"fp16": {"enabled": true, "initial_scale_power": 99}})", "fp16.initial_scale_power");
  ExpectRejected(R"({"gradient_clipping": -1})", "gradient_clipping");
  ExpectRejected(R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage");
  ExpectRejected(R"({"zero_optimization": {"offload_optimizer": {"device": "tape"}}})",
                 "zero_optimization.offload_optimizer.device");
  ExpectRejected(R"({"zerostate": {"train": {"nope": 1}}})", "zerostate.train.nope");
  ExpectRejected(R"({"train_batch_size": "auto"})", "train_batch_size");
  ExpectRejected("[1, 2]", "ds_config");
  ExpectRejected("{not json", "ds_config");
}

TEST(DsConfigTest, MomentFormatIsMapped) {
  auto r = ParseDeepSpeedConfig(R"({"zerostate": {"train": {"moment_format": "MOMENTS_INT8"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.train().moment_format(), v1::MOMENTS_INT8);
  ExpectRejected(R"({"zerostate": {"train": {"moment_format": 5}}})",
                 "zerostate.train.moment_format");
  ExpectRejected(R"({"zerostate": {"train": {"moment_format": "MOMENTS_INT4"}}})",
                 "moment_format");
}

TEST(DsConfigTest, WireIsMappedIntoTheTrainConfig) {
  auto r = ParseDeepSpeedConfig(R"({"zerostate": {"wire": {"gradients": "int8", "weights": "int8"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.train().gradient_wire(), v1::WIRE_INT8);
  EXPECT_EQ(r->config.train().weight_wire(), v1::WIRE_INT8);
  EXPECT_FALSE(r->config.has_wire());  // folded into train
  r = ParseDeepSpeedConfig(R"({"zerostate": {"wire": {"gradients": "int8"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.train().gradient_wire(), v1::WIRE_INT8);
  EXPECT_EQ(r->config.train().weight_wire(), v1::WIRE_PLAIN);
  ExpectRejected(R"({"zerostate": {"wire": {"gradients": "int4"}}})",
                 "zerostate.wire.gradients: 'int4' is not one of int8, plain");
  ExpectRejected(R"({"zerostate": {"wire": {"weights": "bf16"}}})", "zerostate.wire.weights");
}

TEST(DsConfigTest, GradAccumDtypeIsMappedByDeepSpeedsNames) {
  const std::pair<const char*, v1::DType> kCases[] = {
      {"fp32", v1::DTYPE_FP32}, {"float", v1::DTYPE_FP32}, {"BF16", v1::DTYPE_BF16},
      {"bfloat16", v1::DTYPE_BF16}, {"torch.float16", v1::DTYPE_FP16}, {"half", v1::DTYPE_FP16}};
  for (const auto& [name, dtype] : kCases) {
    auto r = ParseDeepSpeedConfig(absl::StrCat(R"({"data_types": {"grad_accum_dtype": ")", name,
                                               R"("}})"));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->config.train().grad_accum_dtype(), dtype) << name;
  }
  auto absent = ParseDeepSpeedConfig("{}");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->config.train().grad_accum_dtype(), v1::DTYPE_UNSPECIFIED);  // fp32
  ExpectRejected(R"({"data_types": {"grad_accum_dtype": "int8"}})", "data_types.grad_accum_dtype");
  ExpectRejected(R"({"zerostate": {"train": {"grad_accum_dtype": 9}}})",
                 "zerostate.train.grad_accum_dtype");
  ExpectRejected(R"({"data_types": {"grad_dtype": "fp32"}})", "data_types.grad_dtype");
}

TEST(DsConfigTest, DelayedUpdateIsMapped) {
  auto r = ParseDeepSpeedConfig(
      R"({"zero_optimization": {"stage": 2, "delayed_update": {"enabled": true, "warmup_steps": 7}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->config.train().delayed_update().enabled());
  EXPECT_EQ(r->config.train().delayed_update().warmup_steps(), 7u);
  ExpectRejected(R"({"zero_optimization": {"delayed_update": {"enabled": true, "warmup": 7}}})",
                 "zero_optimization.delayed_update.warmup");
  auto off = ParseDeepSpeedConfig(R"({"zero_optimization": {"stage": 2}})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->config.train().delayed_update().enabled());
}

TEST(DsConfigTest, NvmeOffloadIsAWarning) {
  auto r = ParseDeepSpeedConfig(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(HasWarning(*r, "offload_optimizer"));
}

// DeepSpeed's ZeRO-Infinity example: the `aio` block, parameter offload to
// CPU or NVMe and ZeRO-3's knobs place memory without changing the math:
// accepted, with one warning per block naming the server flags that do
// that job. Before: refused with "aio: unsupported ds_config key".
TEST(DsConfigTest, ZeroInfinityConfigIsAcceptedWithWarningsNamingTheServerFlags) {
  auto r = ParseDeepSpeedConfig(R"({
    "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {
      "stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true,
                            "buffer_count": 4, "fast_init": false},
      "offload_param": {"device": "cpu", "nvme_path": "/local_nvme", "pin_memory": true,
                        "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9},
      "stage3_max_live_parameters": 1e9,
      "stage3_prefetch_bucket_size": 5e8,
      "sub_group_size": 1e9
    },
    "aio": {"block_size": 262144, "queue_depth": 32, "thread_count": 1,
            "single_submit": false, "overlap_events": true}
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.train().optimizer().kind(), v1::OPTIMIZER_ADAMW);
  EXPECT_FLOAT_EQ(r->config.train().lr().lr(), 1e-4f);
  int aio = 0, param = 0;
  for (const auto& w : r->warnings) {
    if (w.find("'aio'") != std::string::npos) ++aio;
    if (w.find("'zero_optimization.offload_param'") != std::string::npos) ++param;
  }
  EXPECT_EQ(aio, 1) << "one warning for the whole block";
  EXPECT_EQ(param, 1);
  EXPECT_TRUE(HasWarning(*r, "--nvme_queue_depth"));
  EXPECT_TRUE(HasWarning(*r, "--nvme_dir"));
  EXPECT_TRUE(HasWarning(*r, "zero_optimization.stage: 3"));
  EXPECT_TRUE(HasWarning(*r, "zero_optimization.stage3_*"));
  auto param_cpu = ParseDeepSpeedConfig(R"({"zero_optimization": {"offload_param": {"device": "cpu"}}})");
  ASSERT_TRUE(param_cpu.ok()) << param_cpu.status();
  EXPECT_TRUE(HasWarning(*param_cpu, "offload_param"));
}

}  // namespace
}  // namespace zerostate::worker
