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

using KillRestartTest = KillFixture;

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

TEST_F(KillRestartTest, KilledServerWithoutCheckpointsEndsTheRunNamingIt) {
  auto nodes = StartNodes("nockpt", {});
  const std::string victim = cluster_->server(1).address();
  CrashServerAfterStep(*nodes[0], 12);
  std::string logs;
  for (auto& n : nodes) {
    EXPECT_EQ(n->Wait(kRunTimeout), 1) << n->Log();
    logs += n->Log();
  }
  // The failing ranks name the server that lost the job.
  EXPECT_NE(logs.find(victim), std::string::npos) << logs;
}

}  // namespace
}  // namespace zerostate::testing
