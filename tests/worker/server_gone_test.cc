// A state server killed with SIGKILL mid-training that never comes back,
// under real zerostate-worker processes (2 nodes of 2 local ranks as
// threads, 2 real servers, no backups, checkpoints on): rank 0 waits
// --server_wait_seconds for it, then deletes the job on the server that
// still answers, so no rank stays in a gather there (an rpc_timeout per
// attempt, minutes in all), and every rank exits 1 naming the lost server.
#include "tests/worker/kill_fixture.h"

namespace zerostate::testing {
namespace {

// A bound for "the run ends", not a speed target: far below the gathers'
// rpc_timeout x max_attempts (5 minutes) the ranks waited before, and above
// --server_wait_seconds plus a loaded machine's start and rendezvous.
constexpr absl::Duration kEndsWithin = absl::Seconds(60);

class ServerGoneTest : public KillFixture {};

TEST_F(ServerGoneTest, EveryRankEndsNamingTheServerAfterTheServerWait) {
  const std::string victim = cluster_->server(1).address();
  auto nodes = StartNodes("gone", {"--checkpoint_every=5", CheckpointFlag(),
                                   "--server_wait_seconds=3"});
  ASSERT_TRUE(nodes[0]->AwaitLog("step 12 loss", kRunTimeout)) << nodes[0]->Log();
  ASSERT_TRUE(cluster_->server(1).Kill().ok());
  const absl::Time killed = absl::Now();
  for (auto& n : nodes) {
    EXPECT_EQ(n->Wait(kEndsWithin - (absl::Now() - killed)), 1) << n->Log();
    const std::string log = n->Log();
    EXPECT_NE(log.find("a server did not answer within the server wait (3s)"),
              std::string::npos) << log;
    EXPECT_NE(log.find(victim), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace zerostate::testing
