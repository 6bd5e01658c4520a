// The worker's way to its step decisions, without servers: the config
// goes through the worker's NormalizeConfig (which fills the policy's
// fields by the trainer's rules), the coordinator decides on a copy of its
// trainer::Policy and keeps it once the step is done, and every other rank
// takes the coordinator's trainer_state blob from the Step (worker/engine.cc).
// Both give the decisions of the fixed sequence that the C++ policy test and
// the Python package's test (through the C API) check too.
#include <gtest/gtest.h>

#include "tests/trainer/policy_fixture.h"
#include "trainer/policy.h"
#include "worker/config.h"

namespace zerostate::worker {
namespace {

TEST(PolicyPathTest, CoordinatorAndFollowersDecideAsTheFixture) {
  trainer::PolicySequence seq = trainer::LoadPolicySequence();
  ASSERT_FALSE(seq.steps.empty());
  // 2 ranks of 2 micro-batches each: the fixture's average over 4 terms.
  v1::WorkerConfig config;
  *config.mutable_train() = seq.train;
  config.mutable_train()->set_grad_accum_steps(2);
  const uint32_t world = 2;
  ASSERT_EQ(world * config.train().grad_accum_steps(), seq.average_over);
  auto normalized = NormalizeConfig(config, world);
  ASSERT_TRUE(normalized.ok()) << normalized.status();
  trainer::Policy coordinator(normalized->train());
  trainer::Policy follower(normalized->train());
  for (size_t i = 0; i < seq.steps.size(); ++i) {
    const trainer::PolicySequence::Step& s = seq.steps[i];
    EXPECT_EQ(follower.loss_scale(), coordinator.loss_scale()) << "step " << i;
    trainer::Policy next = coordinator;  // kept once the Step succeeded
    auto d = next.Decide(i, s.sum_squares, s.nonfinite, seq.average_over);
    ASSERT_TRUE(d.ok()) << d.status();
    trainer::ExpectDecision(s, i, *d);
    ASSERT_TRUE(follower.Restore(next.TrainerState()).ok());
    EXPECT_EQ(follower.skipped(), s.expect.skip) << "step " << i;
    EXPECT_EQ(follower.loss_scale(), s.expect.next_loss_scale) << "step " << i;
    coordinator = next;
  }
}

}  // namespace
}  // namespace zerostate::worker
