// Crashes under real zerostate-worker processes (2 nodes of 2 local ranks
// as threads) training through 2 real zerostate-server processes:
//   - a server killed with SIGKILL mid-training and restarted on its port:
//     the coordinator restores the last checkpoint on every server, every
//     rank rolls back to it, and the run ends with the weights of a run
//     without the fault, bit for bit;
//   - the same without checkpoints: the run ends with an error naming the
//     lost server instead of training on a partial state.
#include "tests/worker/kill_fixture.h"

namespace zerostate::testing {
namespace {

class KillRestartTest : public KillFixture {
 protected:
  // Past the second kill (after step 31), with the rollback to 30 and a
  // checkpoint interval of training after it.
  KillRestartTest() { steps_ = 40; }
};

TEST_F(KillRestartTest, KilledServerIsRolledBackAndTheRunEndsBitIdentical) {
  const std::string reference = RunClean("clean");
  ASSERT_FALSE(reference.empty());
  // Server 1, then server 0 (which also holds the rendezvous), each killed
  // twice in one run: after step 12 and after step 31.
  for (int victim : {1, 0}) {
    SCOPED_TRACE(absl::StrCat("server ", victim, " killed"));
    const std::string job = absl::StrCat("crash", victim);
    auto nodes = StartNodes(job, {"--checkpoint_every=5", CheckpointFlag()});
    CrashServerAfterStep(*nodes[0], 12, victim);
    CrashServerAfterStep(*nodes[0], 31, victim);
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
    // The faults hit mid-training: rank 0 rolled back to a checkpoint twice.
    const std::string log = nodes[0]->Log();
    const size_t first = log.find("restored");
    ASSERT_NE(first, std::string::npos) << log;
    EXPECT_NE(log.find("restored", first + 1), std::string::npos) << log;
    const std::string crashed = Weights(job);
    EXPECT_EQ(crashed.size(), reference.size());
    EXPECT_TRUE(crashed == reference) << "the rolled-back run ended with other weights";
  }
}

// Without checkpoints every rank exits 1, at once, with the coordinator's
// account: the server that lost the job, and to restore it from a
// checkpoint -- not its own error (a restarted server does not know the
// job's token), and no rank left waiting on the surviving server. The
// kill lands after step 12, or while rank 0 is held before its push of
// step 12 (--test_pause), the other node's ranks in the step.
TEST_F(KillRestartTest, KilledServerWithoutCheckpointsEndsEveryRankNamingIt) {
  const std::string victim = cluster_->server(1).address();
  for (const std::string phase : {"after", "push"}) {
    SCOPED_TRACE(phase);
    const std::string job = "nockpt" + phase;
    const std::string resume = absl::StrCat(dir_, job, ".resume");
    std::vector<std::string> extra;
    if (phase == "push") extra.push_back(absl::StrCat("--test_pause=push:12:", resume));
    auto nodes = StartNodes(job, extra);
    if (phase == "push") {
      ASSERT_TRUE(nodes[0]->AwaitLog("paused before the push of step 12", kRunTimeout))
          << nodes[0]->Log();
      ASSERT_TRUE(cluster_->server(1).Kill().ok());
      ASSERT_TRUE(cluster_->server(1).Restart().ok());
      ASSERT_EQ(std::system(absl::StrCat("touch ", resume).c_str()), 0);
    } else {
      CrashServerAfterStep(*nodes[0], 12);
    }
    for (auto& n : nodes) {
      EXPECT_EQ(n->Wait(kRunTimeout), 1) << n->Log();
      const std::string log = n->Log();
      // Each node's ranks name the server and say what to do.
      EXPECT_NE(log.find("server " + victim), std::string::npos) << log;
      EXPECT_NE(log.find("restore it from a checkpoint"), std::string::npos) << log;
      EXPECT_EQ(log.find("UNAUTHENTICATED"), std::string::npos) << log;
    }
  }
}

}  // namespace
}  // namespace zerostate::testing
