// Fencing of a deposed primary (docs/reliability.md, "Replicated
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
//
// With k >= 2 the new primary's other backups refuse the old primary's
// steps too: every replication message carries its sender's term (address
// and epoch), and a backup refuses a term older than one it accepted
// (server/replication/accepted_terms.h).
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
       {std::string("not primary: shard 0 of job 'fenced' has a newer primary: step 2 from this "
                    "server was refused by ") +
            servers[1],
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

// k = 2 on three servers: every shard on every server. Server 1 claims
// shard 0 while server 0 still serves it, and the new primary's first sums
// of step 2 reach server 2, the shard's other backup, ahead of any step
// (here the test sends that REPLICA_SUM, stamped with a term of server 1
// from before its claim: server 1 has no pushes of its own yet). Server 0,
// unaware, runs step 2 (with an lr no client asks for): server 2 refuses
// it (ABORTED) naming both terms, as server 1 does as primary, so the step
// is not acknowledged, server 2's copy is as it was, and server 0 is
// fenced. Without the term check server 2 would apply the step, and the
// new primary's step 2 would find it applied already: server 2's copy
// would fork. The clients move shard 0 to server 1; the run ends
// bit-identical to the reference, all three copies alike.
TEST(FencingTest, WithTwoBackupsTheOtherBackupRefusesTheDeposedPrimarysStepNamingBothTerms) {
  auto cluster = ServerCluster::Start(3, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<std::string> servers = (*cluster)->addresses();
  const std::string job = "twobackups";
  auto run = StartNodes(ReplicatedSpec(job, 2), servers);
  ASSERT_TRUE(run.ok()) << run.status();
  ReferenceModel ref(run->nodes[0]->spec());
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run->nodes, ref, 0, 2));

  // StaticMembership's epochs are the claims' times: `before` lies between
  // server 0's claim and server 1's.
  const int64_t before = absl::ToUnixMicros(absl::Now());
  grpc::Status claimed = DirectJobStatus(servers[1], job, 0);
  ASSERT_TRUE(claimed.ok()) << claimed.error_message();
  auto copy = ReadCopy(servers[2], job, 0, 2);
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_FALSE(copy->blocks.empty());
  {
    std::unique_ptr<client::DataConn> lane = DataConnTo(servers[2], job);
    ASSERT_NE(lane, nullptr);
    v1::ReplicaSum sum;
    sum.set_job_id(job);
    sum.set_shard(0);
    sum.set_transfer(77);
    sum.set_block(copy->blocks[0].block());
    sum.mutable_term()->set_primary(servers[1]);
    sum.mutable_term()->set_epoch(before);
    absl::Status kept = SendReplicaSum(*lane, kTestJobToken, sum,
                                       ZeroSum(run->nodes[0]->layout(), sum.block()));
    ASSERT_TRUE(kept.ok()) << kept;
  }

  std::vector<std::vector<float>> pushed(kReplicaNodes);
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    client::JobClient& node = *run->nodes[n];
    pushed[n] = NodeGradient(node.layout(), n, 2);
    ASSERT_TRUE(node.Push(2, n, {0, node.layout().used_elems}, pushed[n].data(), v1::DTYPE_FP32)
                    .ok())
        << "node " << n;
  }
  grpc::Status refused = DirectStep(servers[0], job, 0, 2, 1000.0f);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  for (const std::string& part :
       {absl::StrCat("not primary: shard 0 of job '", job, "' has a newer primary: step 2"),
        absl::StrCat(servers[2], " (shard 0 of job '", job, "': a step from primary "),
        absl::StrCat(") is refused: this copy accepted primary ", servers[1], " (epoch ", before,
                     "), a newer term"),
        std::string("has a newer primary: this server"),
        std::string("step 2 is not acknowledged")}) {
    EXPECT_NE(refused.error_message().find(part), std::string::npos)
        << "no '" << part << "' in: " << refused.error_message();
  }
  // Server 2's copy is as it was: version 2, bit for bit.
  auto after = ReadCopy(servers[2], job, 0, 0);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->versions, copy->versions);
  EXPECT_EQ(after->applied_steps, copy->applied_steps);
  EXPECT_TRUE(after->state == copy->state) << "server 2's copy of shard 0 changed";
  grpc::Status fenced = DirectJobStatus(servers[0], job, 0);
  EXPECT_EQ(fenced.error_code(), grpc::StatusCode::UNAVAILABLE) << fenced.error_message();

  // Server 1's own term is newer than `before`: server 2 takes its steps.
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run->nodes, ref, 2, 5));
  ExpectReferenceRun(run->nodes, ref, 5);
  ExpectSameCopies(servers[1], servers[2], job, 0, 5);
  ExpectSameCopies(servers[1], servers[0], job, 0, 5);
}

}  // namespace
}  // namespace zerostate::testing
