// The loss scaler's state as the coordinator leaves it with the servers:
// encoded and decoded exactly, and every malformed text refused naming
// what is wrong.
#include "trainer/trainer_state.h"

#include <gtest/gtest.h>

#include <cmath>

namespace zerostate::trainer {
namespace {

TEST(TrainerStateTest, RoundTripsExactly) {
  v1::LossScaling config;
  config.set_initial_scale(3.0e7f);
  config.set_growth_interval(3);
  config.set_growth_factor(2);
  config.set_backoff_factor(0.5f);
  config.set_min_scale(1);
  config.set_hysteresis(2);
  LossScaler scaler(config, true);
  for (bool overflow : {true, false, false, true, true, false}) scaler.Update(overflow);
  TrainerState state{scaler.state(), true};
  auto decoded = DecodeTrainerState(EncodeTrainerState(state));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->scaler == scaler.state());
  EXPECT_TRUE(decoded->skipped);
  // A scaler set from it goes on exactly like the original.
  LossScaler other(config, true);
  other.set_state(decoded->scaler);
  for (bool overflow : {false, false, false, true}) {
    scaler.Update(overflow);
    other.Update(overflow);
    EXPECT_EQ(other.scale(), scaler.scale());
  }
  EXPECT_TRUE(other.state() == scaler.state());
}

TEST(TrainerStateTest, MalformedTextIsRefusedNamingWhy) {
  const std::string good = EncodeTrainerState({LossScaler::State{65536.0f, 3, 1}, false});
  ASSERT_TRUE(DecodeTrainerState(good).ok());
  const std::pair<std::string, std::string> bad[] = {
      {"", "does not start with 'loss_scaler/1'"},
      {"loss_scaler/2 skipped=0", "does not start with"},
      {"loss_scaler/1 skipped=0 scale_bits=1199570944 clean_steps=3", "'hysteresis_left' missing"},
      {good + " extra=1", "unknown field 'extra'"},
      {good + " skipped=1", "field 'skipped' repeated"},
      {"loss_scaler/1 skipped=2 scale_bits=1199570944 clean_steps=3 hysteresis_left=1",
       "skipped: must be 0 or 1"},
      {"loss_scaler/1 skipped=0 scale_bits=-5 clean_steps=3 hysteresis_left=1",
       "scale_bits: '-5' is not a 32-bit unsigned"},
      {"loss_scaler/1 skipped=0 scale_bits=2139095040 clean_steps=3 hysteresis_left=1",
       "is not finite and > 0"},  // +inf
      {"loss_scaler/1 skipped=0 scale_bits=0 clean_steps=3 hysteresis_left=1",
       "is not finite and > 0"},
  };
  for (const auto& [text, why] : bad) {
    auto decoded = DecodeTrainerState(text);
    EXPECT_TRUE(absl::IsDataLoss(decoded.status())) << text << ": " << decoded.status();
    EXPECT_NE(decoded.status().message().find(why), std::string::npos)
        << text << ": " << decoded.status();
  }
}

}  // namespace
}  // namespace zerostate::trainer
