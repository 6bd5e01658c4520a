// Fencing of a deposed primary (issue 19; docs/reliability.md, "Replicated
// shards"): a backup that serves its shard as primary now refuses the old
// primary's step (ABORTED), and the old primary then does not acknowledge
// it, fences itself for the shard and waits for a catch-up, so an
// acknowledged step never exists only on a server that is no longer
// primary. Real server processes: a job of two nodes on three servers with
// one backup per shard, without etcd (StaticMembership: a backup asked for
// its shard claims it, while the old primary still holds its own claim,
// which is the split a primary cut off from etcd, or paused past its
// lease, sees before it notices). The same through a real etcd:
// etcd_partition_test's EtcdPartitionTest.APrimaryWhoseLeaseExpiredUnnoticedIsDeposedAtItsNextStep.
#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

TEST(FencingTest, ADeposedPrimarysStepIsRefusedNotAcknowledgedAndTheRunEndsBitIdentical) {
  auto cluster = ServerCluster::Start(3, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<std::string> servers = (*cluster)->addresses();
  const std::string job = "fenced";
  auto run = StartNodes(ReplicatedSpec(job, 1), servers);
  ASSERT_TRUE(run.ok()) << run.status();
  ReferenceModel ref(run->nodes[0]->spec());
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run->nodes, ref, 0, 2));

  // Server 1, shard 0's backup, takes the shard over while server 0 still
  // serves it; the clients still send shard 0 to server 0.
  grpc::Status claimed = DirectJobStatus(servers[1], job, 0);
  ASSERT_TRUE(claimed.ok()) << claimed.error_message();
  // The nodes push step 2 (a push's buffer stays as pushed until the new
  // version is gathered: a failover sends it again).
  std::vector<std::vector<float>> pushed(kReplicaNodes);
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    client::JobClient& node = *run->nodes[n];
    pushed[n] = NodeGradient(node.layout(), n, 2);
    ASSERT_TRUE(node.Push(2, n, {0, node.layout().used_elems}, pushed[n].data(), v1::DTYPE_FP32)
                    .ok())
        << "node " << n;
  }
  // Server 0 runs step 2 (with a learning rate no client asks for): server
  // 1 refuses it, so it is not acknowledged, and server 0 is fenced.
  grpc::Status refused = DirectStep(servers[0], job, 0, 2, 1000.0f);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  for (const std::string& part :
       {std::string("not primary: shard 0 of job 'fenced' has a newer primary, ") + servers[1],
        std::string("has a newer primary: this server"),
        std::string("step 2 is not acknowledged")}) {
    EXPECT_NE(refused.error_message().find(part), std::string::npos)
        << "no '" << part << "' in: " << refused.error_message();
  }
  auto new_primary = ReadCopy(servers[1], job, 0, 0);
  ASSERT_TRUE(new_primary.ok()) << new_primary.status();
  for (uint64_t v : new_primary->versions) EXPECT_EQ(v, 2u) << "the new primary got step 2";
  // The old primary answers for shard 0 no more, naming the new one.
  grpc::Status fenced = DirectJobStatus(servers[0], job, 0);
  EXPECT_EQ(fenced.error_code(), grpc::StatusCode::UNAVAILABLE) << fenced.error_message();
  EXPECT_NE(fenced.error_message().find(servers[1]), std::string::npos) << fenced.error_message();

  // The clients move shard 0 to server 1 and run step 2 there (once);
  // server 1 catches server 0's copy up, whose unacknowledged step is gone.
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run->nodes, ref, 2, 5));
  ExpectReferenceRun(run->nodes, ref, 5);
  ExpectSameCopies(servers[1], servers[0], job, 0, 5);
}

}  // namespace
}  // namespace zerostate::testing
