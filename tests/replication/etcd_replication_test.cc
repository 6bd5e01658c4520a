// Replicated shards with the servers' membership in a real etcd
// (tests/testing/etcd_process.h): three zerostate-server processes started
// with --etcd_endpoints, a job of two nodes with one backup per shard.
// Skipped where /usr/bin/etcd is missing.
#include "tests/replication/etcd_cluster_fixture.h"

namespace zerostate::server {
namespace {

class EtcdReplicationTest : public EtcdClusterFixture {
 protected:
  EtcdReplicationTest() : EtcdClusterFixture("repl") {}

  void SetUp() override {
    EtcdClusterFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    StartServers({"--metrics_listen=127.0.0.1:0"});  // DataPlanePushBytes
  }

  // Each shard's term in etcd: held by its own server; epochs out.
  void ExpectOwnPrimaries(const std::string& job, const std::vector<std::string>& servers,
                          std::vector<int64_t>* epochs) {
    epochs->resize(servers.size());
    for (int shard = 0; shard < static_cast<int>(servers.size()); ++shard) {
      auto term = observer_->Primary(job, shard);
      ASSERT_TRUE(term.ok()) << "shard " << shard << ": " << term.status();
      EXPECT_EQ(term->primary, servers[shard]);
      (*epochs)[shard] = term->epoch;
    }
  }
};

TEST_F(EtcdReplicationTest, DeletingAJobReleasesItsPrimariesClaimsAtOnce) {
  const std::vector<std::string> servers = addresses();
  v1::JobSpec spec = testing::ReplicatedSpec("released", 1);
  std::vector<int64_t> epochs;
  {
    auto run = testing::StartNodes(spec, servers);
    ASSERT_TRUE(run.ok()) << run.status();
    testing::ReferenceModel ref(run->nodes[0]->spec());
    Train(*run, ref, 0, 2);
    // Each server claimed its own shard at its first call.
    ExpectOwnPrimaries(spec.job_id(), servers, &epochs);
    ASSERT_TRUE(run->nodes[0]->Delete().ok());
    // Released by each server before its DeleteJob answered: no lease to wait for.
    for (int shard = 0; shard < static_cast<int>(servers.size()); ++shard) {
      auto term = observer_->Primary(spec.job_id(), shard);
      EXPECT_TRUE(absl::IsNotFound(term.status()))
          << "shard " << shard << ": " << (term.ok() ? term->primary : term.status().ToString());
    }
  }
  // The id registered again: claimed anew, each with a larger epoch, and
  // the run starts over from version 0 with the reference's weights.
  auto run = testing::StartNodes(spec, servers);
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());
  Train(*run, ref, 0, 2);
  std::vector<int64_t> again;
  ExpectOwnPrimaries(spec.job_id(), servers, &again);
  for (size_t shard = 0; shard < servers.size(); ++shard) {
    EXPECT_GT(again[shard], epochs[shard]) << "shard " << shard;
  }
  testing::ExpectReferenceRun(run->nodes, ref, 2);
}

// A primary SIGKILLed in the middle of a step (after node 0's pushes,
// before GradStats): its claim lives until etcd expires its lease, so its
// backup refuses the shard ("not primary") until then; the clients keep
// asking and move the shard once the backup's claim succeeds, with a larger
// epoch. The step is applied once and the run ends bit-identical to the
// reference, with no rollback.
TEST_F(EtcdReplicationTest, AKilledPrimarysBackupClaimsItsShardOnceTheLeaseExpires) {
  const std::vector<std::string> servers = addresses();
  v1::JobSpec spec = testing::ReplicatedSpec("failover", 1);
  auto run = testing::StartNodes(spec, servers);
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());
  Train(*run, ref, 0, 2);
  std::vector<int64_t> epochs;
  ExpectOwnPrimaries(spec.job_id(), servers, &epochs);
  Train(*run, ref, 2, 5, [&] { ASSERT_TRUE(server(1).Kill().ok()); });
  EXPECT_FALSE(server(1).running());
  // Shard 1 is server 2's now (the next server of the ring), claimed anew.
  auto term = observer_->Primary(spec.job_id(), 1);
  ASSERT_TRUE(term.ok()) << term.status();
  EXPECT_EQ(term->primary, servers[2]);
  EXPECT_GT(term->epoch, epochs[1]);
  testing::ExpectReferenceRun(run->nodes, ref, 5);
}

// Re-replication through etcd: server 1 SIGKILLed between steps (shard 1
// moves to server 2 once its lease expires), restarted empty (it revokes
// its old lease before serving), caught up by the primaries of shards 0 and
// 1 at the next step, bit-identical to them; then server 2 is SIGKILLed and
// shard 1 moves back to the caught-up copy on server 1, with no rollback,
// and the clients push to it on its new data port.
TEST_F(EtcdReplicationTest, ARestartedServerIsCaughtUpAndTakesItsShardBack) {
  const std::vector<std::string> servers = addresses();
  v1::JobSpec spec = testing::ReplicatedSpec("catchup", 1);
  auto run = testing::StartNodes(spec, servers);
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());
  Train(*run, ref, 0, 2);
  ASSERT_TRUE(server(1).Kill().ok());
  Train(*run, ref, 2, 4);
  ASSERT_TRUE(server(1).Restart().ok());
  Train(*run, ref, 4, 6);
  uint64_t step = 6;
  ASSERT_NO_FATAL_FAILURE(
      testing::TrainUntilReplicated(run->nodes, ref, &step, {&server(0), &server(2)}));
  testing::ExpectSameCopies(servers[0], servers[1], spec.job_id(), 0, step);
  testing::ExpectSameCopies(servers[2], servers[1], spec.job_id(), 1, step);
  ASSERT_TRUE(server(2).Kill().ok());
  const double pushed = testing::DataPlanePushBytes(server(1));
  Train(*run, ref, step, step + 2);
  auto term = observer_->Primary(spec.job_id(), 1);
  ASSERT_TRUE(term.ok()) << term.status();
  EXPECT_EQ(term->primary, servers[1]);
  // The clients push to it on the data port its new process listens on
  // (learned at the failover), not over gRPC.
  EXPECT_GT(testing::DataPlanePushBytes(server(1)), pushed);
  testing::ExpectReferenceRun(run->nodes, ref, step + 2);
}

}  // namespace
}  // namespace zerostate::server
