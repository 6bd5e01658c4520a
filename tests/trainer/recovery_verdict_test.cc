// trainer::DecideRecovery, a pure function: each answer of the servers
// (client::JobLoss) with and without a checkpoint.
#include "trainer/engine/recovery_verdict.h"

#include <gtest/gtest.h>

namespace zerostate::trainer {
namespace {

const CheckpointNames kNames{"--checkpoint_every=0", "--checkpoint_every=N"};

client::JobLoss Loss(client::JobLoss::Cause cause, std::string account) {
  client::JobLoss loss;
  loss.cause = cause;
  loss.account = std::move(account);
  return loss;
}

TEST(RecoveryVerdictTest, EveryServerHoldingTheJobIsNoCauseToRollBack) {
  for (const char* checkpoint : {"", "/ckpt/job/v5"}) {
    RecoveryVerdict v = DecideRecovery(Loss(client::JobLoss::Cause::kNone, ""), "job", checkpoint,
                                       kNames);
    EXPECT_FALSE(v.roll_back) << checkpoint;
    EXPECT_FALSE(v.lost) << checkpoint;
    EXPECT_EQ(v.why, "every server still holds the job");
  }
}

TEST(RecoveryVerdictTest, ALostShardRollsBackToTheCheckpoint) {
  RecoveryVerdict v = DecideRecovery(
      Loss(client::JobLoss::Cause::kShardLost, "server b:2 restarted"), "job", "/ckpt/job/v5",
      kNames);
  EXPECT_TRUE(v.roll_back);
  EXPECT_FALSE(v.lost);
  EXPECT_EQ(v.why, "");
}

TEST(RecoveryVerdictTest, ALostShardWithoutACheckpointEndsTheRunSayingHowToGoOn) {
  RecoveryVerdict v = DecideRecovery(
      Loss(client::JobLoss::Cause::kShardLost, "server b:2 restarted"), "job", "", kNames);
  EXPECT_FALSE(v.roll_back);
  EXPECT_TRUE(v.lost);
  EXPECT_EQ(v.why,
            "server b:2 restarted; there is no checkpoint to roll back to "
            "(--checkpoint_every=0), so job job was deleted on every server: restore it from a "
            "checkpoint of yours (RestoreJob) or start the run again, with --checkpoint_every=N "
            "to roll back by itself next time");
}

TEST(RecoveryVerdictTest, ASilentServerEndsTheRunEvenWithACheckpoint) {
  for (const char* checkpoint : {"", "/ckpt/job/v5"}) {
    RecoveryVerdict v = DecideRecovery(
        Loss(client::JobLoss::Cause::kServerSilent, "server b:2 did not answer"), "job",
        checkpoint, kNames);
    EXPECT_FALSE(v.roll_back) << checkpoint;
    EXPECT_TRUE(v.lost) << checkpoint;
    EXPECT_EQ(v.why, std::string("server b:2 did not answer; job job was deleted on the servers "
                                 "that answer, so no rank waits on them: bring the server back "
                                 "and restore the job from ") +
                         (*checkpoint ? "the checkpoint /ckpt/job/v5" : "a checkpoint of yours") +
                         " (RestoreJob), or start the run again");
  }
}

}  // namespace
}  // namespace zerostate::trainer
