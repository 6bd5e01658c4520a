// The step policy over the fixed sequence of testdata/fp16_hysteresis2.json:
// the fixture is DeepSpeed's rule (written out below), the policy gives
// it, and its state goes on exactly through the trainer_state blob.
#include "trainer/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/trainer/policy_fixture.h"

namespace zerostate::trainer {
namespace {

// DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/
// loss_scaler.py; consecutive_hysteresis off, scale_factor 2), as written
// there: an overflow with hysteresis left above 1 only uses one up; at 1
// it backs off and hysteresis stays 1; a growth comes when the stable
// interval (iterations since the last overflow, less one) is a positive
// multiple of the window, and only a growth refills the hysteresis.
struct DeepSpeedScaler {
  double cur_scale;
  int64_t delayed_shift;
  int64_t cur_hysteresis;
  int64_t scale_window;
  double min_scale;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;

  void UpdateScale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        cur_scale = std::max(cur_scale / 2, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if (stable_interval > 0 && stable_interval % scale_window == 0) {
        cur_hysteresis = delayed_shift;
        cur_scale *= 2;
      }
    }
    cur_iter += 1;
  }
};

// DeepSpeed's fused optimizer's clip: clip = (norm + 1e-6) / max_norm, and
// the gradient is divided by it when it is above 1.
double DeepSpeedClipFactor(double norm, double max_norm) {
  double clip = (norm + 1e-6) / max_norm;
  return clip > 1 ? 1 / clip : 1;
}

TEST(PolicyTest, FixtureIsDeepSpeedsRule) {
  PolicySequence seq = LoadPolicySequence();
  ASSERT_FALSE(seq.steps.empty());
  const v1::LossScaling& ls = seq.train.loss_scaling();
  ASSERT_EQ(ls.hysteresis(), 2u);
  DeepSpeedScaler ds{ls.initial_scale(), ls.hysteresis(), ls.hysteresis(), ls.growth_interval(),
                     1.0};
  for (size_t i = 0; i < seq.steps.size(); ++i) {
    const PolicySequence::Step& s = seq.steps[i];
    const bool overflow = s.nonfinite > 0;
    EXPECT_EQ(s.expect.skip, overflow) << "step " << i;
    if (!overflow) {
      double norm = std::sqrt(s.sum_squares) / (ds.cur_scale * seq.average_over);
      EXPECT_NEAR(s.expect.grad_norm, norm, 1e-12 * norm) << "step " << i;
      EXPECT_NEAR(s.expect.clip_factor, DeepSpeedClipFactor(norm, seq.train.gradient_clipping()),
                  1e-12)
          << "step " << i;
    }
    ds.UpdateScale(overflow);
    EXPECT_EQ(s.expect.next_loss_scale, ds.cur_scale) << "step " << i << " (" << s.why << ")";
  }
}

TEST(PolicyTest, DecidesAsTheFixture) {
  PolicySequence seq = LoadPolicySequence();
  auto policy = Policy::Create(seq.train);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->loss_scale(), seq.train.loss_scaling().initial_scale());
  for (size_t i = 0; i < seq.steps.size(); ++i) {
    const PolicySequence::Step& s = seq.steps[i];
    auto d = policy->Decide(i, s.sum_squares, s.nonfinite, seq.average_over);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectDecision(s, i, *d);
    EXPECT_EQ(policy->loss_scale(), s.expect.next_loss_scale);
    EXPECT_EQ(policy->skipped(), s.expect.skip);
  }
}

TEST(PolicyTest, GoesOnExactlyThroughTheBlobMidSequence) {
  PolicySequence seq = LoadPolicySequence();
  auto policy = Policy::Create(seq.train);
  ASSERT_TRUE(policy.ok()) << policy.status();
  for (size_t i = 0; i < seq.steps.size(); ++i) {
    const PolicySequence::Step& s = seq.steps[i];
    auto d = policy->Decide(i, s.sum_squares, s.nonfinite, seq.average_over);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectDecision(s, i, *d);
    if (std::find(seq.restore_after.begin(), seq.restore_after.end(), i) ==
        seq.restore_after.end()) {
      continue;
    }
    const std::string blob = policy->TrainerState();
    auto fresh = Policy::Create(seq.train);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    ASSERT_TRUE(fresh->Restore(blob).ok()) << blob;
    EXPECT_EQ(fresh->TrainerState(), blob);
    EXPECT_EQ(fresh->skipped(), s.expect.skip);
    policy = std::move(fresh);
  }
}

TEST(PolicyTest, BadInputIsRefusedByNameAndChangesNothing) {
  PolicySequence seq = LoadPolicySequence();
  auto policy = Policy::Create(seq.train);
  ASSERT_TRUE(policy.ok()) << policy.status();
  ASSERT_TRUE(policy->Decide(0, 0, 5, 4).ok());  // an overflow: hysteresis 2 -> 1
  const std::string before = policy->TrainerState();
  const struct {
    double sum_squares, average_over;
    const char* names;
  } bad[] = {{1, 0, "average_over"}, {1, NAN, "average_over"}, {1, INFINITY, "average_over"},
             {-1, 4, "sum_squares"}};
  for (const auto& b : bad) {
    auto d = policy->Decide(1, b.sum_squares, 0, b.average_over);
    EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << b.names << ": " << d.status();
    EXPECT_NE(d.status().message().find(b.names), std::string::npos) << d.status();
    EXPECT_EQ(policy->TrainerState(), before);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(policy->UnclippedGradScale(0.5).status()));
  for (const char* blob : {"", "loss_scaler/1 skipped=0", "loss_scaler/1 skipped=0 scale_bits=0 "
                                                          "clean_steps=1 hysteresis_left=1"}) {
    absl::Status s = policy->Restore(blob);
    EXPECT_TRUE(absl::IsDataLoss(s)) << blob << ": " << s;
    EXPECT_EQ(policy->TrainerState(), before);
  }
}

TEST(PolicyTest, BadConfigIsRefusedNamingTheField) {
  const std::pair<const char*, void (*)(v1::TrainConfig*)> bad[] = {
      {"train.lr.min_lr", [](v1::TrainConfig* t) { t->mutable_lr()->set_min_lr(1); }},
      {"train.gradient_clipping", [](v1::TrainConfig* t) { t->set_gradient_clipping(-1); }},
      {"train.loss_scaling.backoff_factor",
       [](v1::TrainConfig* t) { t->mutable_loss_scaling()->set_backoff_factor(2); }},
      {"train.precision",
       [](v1::TrainConfig* t) { t->set_precision(static_cast<v1::Precision>(99)); }},
  };
  for (const auto& [field, spoil] : bad) {
    v1::TrainConfig train;
    spoil(&train);
    auto policy = Policy::Create(train);
    EXPECT_TRUE(absl::IsInvalidArgument(policy.status())) << field << ": " << policy.status();
    EXPECT_NE(policy.status().message().find(field), std::string::npos) << policy.status();
  }
}

TEST(PolicyTest, WithoutFp16TheScaleStaysOneAndNothingIsCarried) {
  v1::TrainConfig train;
  train.set_precision(v1::PRECISION_BF16);
  auto policy = Policy::Create(train);
  ASSERT_TRUE(policy.ok()) << policy.status();
  auto d = policy->Decide(0, 1, 3, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->skip);
  EXPECT_EQ(d->next_loss_scale, 1.0f);
  EXPECT_FLOAT_EQ(d->lr, 1e-3f);  // the default schedule: constant 1e-3
  EXPECT_EQ(policy->TrainerState(), "");
  EXPECT_TRUE(policy->Restore("").ok());
  EXPECT_EQ(*policy->UnclippedGradScale(2), 0.5f);
}

TEST(PolicyTest, EndsDelayedAfterTheWarmupButNotBeforeASyncPoint) {
  v1::TrainConfig train;
  auto off = Policy::Create(train);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->EndsDelayed(5, false));
  train.mutable_delayed_update()->set_enabled(true);
  train.mutable_delayed_update()->set_warmup_steps(3);
  auto on = Policy::Create(train);
  ASSERT_TRUE(on.ok()) << on.status();
  for (uint64_t step : {0, 1}) EXPECT_FALSE(on->EndsDelayed(step, false)) << step;
  EXPECT_TRUE(on->EndsDelayed(2, false));  // step 3 runs on version 2's weights
  EXPECT_FALSE(on->EndsDelayed(2, true));  // version 3 is a checkpoint
  train.mutable_delayed_update()->set_warmup_steps(0);  // the first step is synchronous
  auto no_warmup = Policy::Create(train);
  ASSERT_TRUE(no_warmup.ok()) << no_warmup.status();
  EXPECT_TRUE(no_warmup->EndsDelayed(0, false));
}

}  // namespace
}  // namespace zerostate::trainer
