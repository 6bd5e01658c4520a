// A replacement of a hung server on another address (zerostate-server
// --replace), in a real etcd cluster of three servers and a job of two
// nodes with one backup per shard. Skipped where /usr/bin/etcd is missing.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>

#include "tests/replication/etcd_cluster_fixture.h"

namespace zerostate::server {
namespace {

class EtcdReplacementTest : public EtcdClusterFixture {
 protected:
  EtcdReplacementTest() : EtcdClusterFixture("replace") {}

  void SetUp() override {
    EtcdClusterFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // --metrics_listen: TrainUntilReplicated, DataPlanePushBytes. A step
    // waits for a hung backup 3 s at most, then goes on without its copy.
    StartServers({"--metrics_listen=127.0.0.1:0", "--replica_timeout_seconds=3"});
  }
};

// Server 1 hangs (SIGSTOP; the clients' 1 s keepalive gives its
// connections up, and shard 1 moves to its backup, server 2, once etcd
// expired its lease) and a replacement comes up on another port under
// server 1's name: the primaries of shards 0 and 1 find it through etcd
// and catch it up, bit-identical to their copies. The hung process wakes
// (SIGCONT), finds its name held by the replacement, and stops (exit
// status 3) without a step applied twice or lost. Then server 2 is
// SIGKILLed, the clients learn where server 1 is dialled now from server
// 0, and shard 1 moves back to the replacement, pushed to on its data
// plane; the run ends bit-identical to the undisturbed reference.
TEST_F(EtcdReplacementTest, AReplacementOnAnotherAddressIsCaughtUpAndTakesItsShardBack) {
  const std::vector<std::string> servers = addresses();
  v1::JobSpec spec = testing::ReplicatedSpec("replaced", 1);
  auto run = testing::StartNodes(spec, servers, nullptr, [](client::ClientOptions& o) {
    o.keepalive_time = std::chrono::milliseconds(1000);
    o.keepalive_timeout = std::chrono::milliseconds(1000);
  });
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());
  Train(*run, ref, 0, 2);
  ASSERT_EQ(kill(server(1).pid(), SIGSTOP), 0);
  Train(*run, ref, 2, 3);
  std::unique_ptr<testing::ServerProcess> hung;
  ASSERT_NO_FATAL_FAILURE(Replace(1, &hung));
  auto dialled = observer_->Resolve(servers[1]);
  ASSERT_TRUE(dialled.ok()) << dialled.status();
  EXPECT_EQ(*dialled, server(1).address());
  uint64_t step = 3;
  ASSERT_NO_FATAL_FAILURE(
      testing::TrainUntilReplicated(run->nodes, ref, &step, {&server(0), &server(2)}));
  testing::ExpectSameCopies(servers[0], server(1).address(), spec.job_id(), 0, step);
  testing::ExpectSameCopies(servers[2], server(1).address(), spec.job_id(), 1, step);
  ASSERT_EQ(kill(hung->pid(), SIGCONT), 0);
  auto exited = hung->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(exited.ok()) << "the woken old server 1 kept running: " << exited.status();
  EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) == 3) << "wait status " << *exited;
  ASSERT_TRUE(server(2).Kill().ok());
  const double pushed = testing::DataPlanePushBytes(server(1));
  Train(*run, ref, step, step + 2);
  auto term = observer_->Primary(spec.job_id(), 1);
  ASSERT_TRUE(term.ok()) << term.status();
  EXPECT_EQ(term->primary, servers[1]);  // by its name
  EXPECT_GT(testing::DataPlanePushBytes(server(1)), pushed);
  testing::ExpectReferenceRun(run->nodes, ref, step + 2);
}

}  // namespace
}  // namespace zerostate::server
