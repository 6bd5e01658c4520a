#include "trainer/step_policy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/lr_schedule.h"

namespace zerostate::trainer {
namespace {

TEST(StepPolicyTest, ScaleFoldsLossScaleAndAverage) {
  StepDecision d = DecideStep(4.0, 0, 8.0f, 4.0, 0.0f);
  EXPECT_FALSE(d.skip);
  EXPECT_FLOAT_EQ(d.grad_scale, 1.0f / 32.0f);
  EXPECT_DOUBLE_EQ(d.grad_norm, 2.0 / 32.0);
  EXPECT_DOUBLE_EQ(d.clip_factor, 1.0);
}

TEST(StepPolicyTest, ClipsToMaxNorm) {
  StepDecision d = DecideStep(100.0, 0, 1.0f, 1.0, 2.0f);  // norm 10
  EXPECT_NEAR(d.clip_factor, 0.2, 1e-6);
  EXPECT_NEAR(d.grad_scale, 0.2f, 1e-6f);
  EXPECT_DOUBLE_EQ(DecideStep(1.0, 0, 1.0f, 1.0, 2.0f).clip_factor, 1.0);
  // At max_norm itself: norm + 1e-6 is above it (DeepSpeed's and torch's rule).
  EXPECT_DOUBLE_EQ(DecideStep(4.0, 0, 1.0f, 1.0, 2.0f).clip_factor, 2.0 / (2.0 + 1e-6));
}

TEST(StepPolicyTest, NonFiniteSkips) {
  EXPECT_TRUE(DecideStep(1.0, 3, 1.0f, 1.0, 0.0f).skip);
  EXPECT_TRUE(DecideStep(INFINITY, 0, 1.0f, 1.0, 0.0f).skip);
}

v1::LossScaling Scaling() {
  v1::LossScaling ls;
  ls.set_initial_scale(1024);
  ls.set_growth_interval(2);
  ls.set_growth_factor(2);
  ls.set_backoff_factor(0.5f);
  ls.set_min_scale(256);
  ls.set_hysteresis(2);
  return ls;
}

TEST(LossScalerTest, BacksOffAfterHysteresisAndGrowsAfterInterval) {
  LossScaler s(Scaling(), true);
  s.Update(true);  // first overflow: hysteresis absorbs it
  EXPECT_EQ(s.scale(), 1024.0f);
  s.Update(true);
  EXPECT_EQ(s.scale(), 512.0f);
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 256.0f);  // not below min_scale
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 256.0f);
  s.Update(false);  // growth_interval + 1 clean steps since the overflow
  EXPECT_EQ(s.scale(), 512.0f);
  s.Update(false);
  s.Update(false);  // then every growth_interval
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(LossScalerTest, DisabledOrStaticStaysPut) {
  LossScaler off(Scaling(), false);
  off.Update(true);
  EXPECT_EQ(off.scale(), 1.0f);
  auto cfg = Scaling();
  cfg.set_static_scale(true);
  LossScaler fixed(cfg, true);
  fixed.Update(true);
  fixed.Update(true);
  EXPECT_EQ(fixed.scale(), 1024.0f);
}

TEST(LrScheduleTest, WarmupThenCosineToMin) {
  v1::LrSchedule s;
  s.set_lr(1.0f);
  s.set_warmup_steps(4);
  s.set_decay(v1::LR_DECAY_COSINE);
  s.set_decay_steps(10);
  s.set_min_lr(0.1f);
  EXPECT_FLOAT_EQ(LearningRate(s, 0), 0.25f);
  EXPECT_FLOAT_EQ(LearningRate(s, 3), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 4), 1.0f);
  EXPECT_NEAR(LearningRate(s, 9), 0.55f, 1e-6f);
  EXPECT_FLOAT_EQ(LearningRate(s, 14), 0.1f);
  EXPECT_FLOAT_EQ(LearningRate(s, 100), 0.1f);
}

TEST(LrScheduleTest, LinearAndConstant) {
  v1::LrSchedule s;
  s.set_lr(2.0f);
  s.set_decay(v1::LR_DECAY_LINEAR);
  s.set_decay_steps(4);
  EXPECT_FLOAT_EQ(LearningRate(s, 0), 2.0f);
  EXPECT_FLOAT_EQ(LearningRate(s, 2), 1.0f);
  s.set_decay(v1::LR_DECAY_NONE);
  EXPECT_FLOAT_EQ(LearningRate(s, 3), 2.0f);
}

}  // namespace
}  // namespace zerostate::trainer
