// Replicated shards with real server processes: every backup
// copy is bit-identical to its primary at every acknowledged version, the
// weights equal those of an unreplicated run, and a spec asking for more
// backups than the cluster can place is refused naming the field.
#include <unistd.h>

#include "tests/replication/replication_fixture.h"
#include "tests/testing/test_certificates.h"

namespace zerostate::testing {
namespace {

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Each streamed step's sums on three connections to each backup's
    // data plane (REPLICA_SUM frames), the step on ApplyStep.
    ServerProcessOptions o = MeteredServerOptions();
    o.args.push_back("--replica_lanes=3");
    auto cluster = ServerCluster::Start(3, o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // kReplicaNodes job clients of `spec`: node 0 registers, node 1 attaches.
  void Open(const v1::JobSpec& spec) {
    for (uint32_t n = 0; n < kReplicaNodes; ++n) {
      auto c = client::Client::Connect(TestClientOptions(cluster_->addresses()));
      ASSERT_TRUE(c.ok()) << c.status();
      auto j = n == 0 ? (*c)->RegisterJob(spec) : (*c)->AttachJob(spec.job_id());
      ASSERT_TRUE(j.ok()) << j.status();
      clients_.push_back(*std::move(c));
      nodes_.push_back(*std::move(j));
    }
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::vector<std::unique_ptr<client::Client>> clients_;
  std::vector<std::unique_ptr<client::JobClient>> nodes_;
};

TEST_F(ReplicationTest, EveryBackupIsBitIdenticalToItsPrimaryAtEveryStep) {
  constexpr int kSteps = 4;
  Open(ReplicatedSpec("replicated", 1));
  ReferenceModel ref(nodes_[0]->spec());
  const auto servers = cluster_->addresses();
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(RunStep(nodes_, step).ok()) << "step " << step;
    std::vector<std::vector<float>> grads;
    for (uint32_t n = 0; n < kReplicaNodes; ++n)
      grads.push_back(NodeGradient(ref.layout(), n, step));
    ref.Step(step, grads, StepLr(step), kStepScale);
    // The Step was answered: each shard's backup (the next server) holds
    // the new version already, bit for bit.
    for (uint32_t shard = 0; shard < 3; ++shard) {
      ExpectSameCopies(servers[shard], servers[(shard + 1) % 3], "replicated", shard, step + 1);
    }
  }
  const uint64_t total = ref.layout().total_elems;
  std::vector<float> master(total);
  ASSERT_TRUE(nodes_[1]->GatherMaster(kSteps, {0, total}, master.data()).ok());
  ExpectBitIdentical(master.data(), ref.master(), total, "master weights with one backup");
  // Steps 1 on were streamed: each backup took its sums on its data plane.
  // Each primary's Steps observed the replication's phases.
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(ReplicaSumBytes(cluster_->server(i)), 0) << "server " << i;
    for (const char* phase : {"replicate", "backups"}) {
      EXPECT_EQ(ServerMetric(cluster_->server(i),
                             absl::StrCat("zerostate_step_phase_seconds_count{job_id=\"replicated\","
                                          "phase=\"",
                                          phase, "\"}")),
                kSteps)
          << "server " << i << ", phase " << phase;
    }
  }
}

// A job with int8 moments: backups apply the same compact step and hold
// the same bytes (masters, codes and scales) as their primaries.
TEST_F(ReplicationTest, Int8MomentBackupsAreBitIdenticalToTheirPrimaries) {
  v1::JobSpec spec = ReplicatedSpec("int8", 1);
  spec.set_moment_format(v1::MOMENTS_INT8);
  Open(spec);
  const auto servers = cluster_->addresses();
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(RunStep(nodes_, step).ok()) << "step " << step;
    for (uint32_t shard = 0; shard < 3; ++shard) {
      ExpectSameCopies(servers[shard], servers[(shard + 1) % 3], "int8", shard, step + 1);
    }
  }
}

// One node pushing bf16 gradients: each block keeps the gradient where it
// lands (single-gradient mode), the primaries send it widened and the
// backups land it again; every copy is bit-identical to its primary, and
// the weights are the reference's (which sums the wire's bf16 in fp32).
TEST_F(ReplicationTest, OneNodesLandedBf16GradientReplicatesBitIdentical) {
  constexpr int kSteps = 3;
  v1::JobSpec spec = TestSpec("single", 1, v1::DTYPE_BF16, v1::DTYPE_BF16);
  spec.set_replicas(1);
  auto c = client::Client::Connect(TestClientOptions(cluster_->addresses()));
  ASSERT_TRUE(c.ok()) << c.status();
  auto job = (*c)->RegisterJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const auto servers = cluster_->addresses();
  const uint64_t used = ref.layout().used_elems;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> g = NodeGradient(ref.layout(), 0, step);
    ASSERT_TRUE((*job)->Push(step, 0, {0, used}, g.data(), v1::DTYPE_FP32).ok());
    ASSERT_TRUE((*job)->GradStats(step).ok());
    ASSERT_TRUE((*job)->Step(step, StepLr(step), 1.0f, false).ok()) << "step " << step;
    ref.Step(step, {g}, StepLr(step), 1.0f);
    for (uint32_t shard = 0; shard < 3; ++shard) {
      ExpectSameCopies(servers[shard], servers[(shard + 1) % 3], "single", shard, step + 1);
    }
  }
  const uint64_t total = ref.layout().total_elems;
  std::vector<float> master(total);
  ASSERT_TRUE((*job)->GatherMaster(kSteps, {0, total}, master.data()).ok());
  ExpectBitIdentical(master.data(), ref.master(), total, "master weights, one bf16 node");
}

// Under mutual TLS the primaries reach their backups' data planes with
// their own certificates: the sums travel there, and the run ends with the
// reference's weights (the same as without backups), bit for bit.
TEST(ReplicationTlsTest, UnderMutualTlsTheSumsTravelOnTheDataPlaneAndTheRunEndsBitIdentical) {
  const TestCertificates certs(
      absl::StrCat(::testing::TempDir(), "zerostate_replication_certs.", getpid()));
  ASSERT_TRUE(certs.ok()) << certs.Log();
  ServerProcessOptions o = MeteredServerOptions();
  o.plaintext = false;
  o.args.push_back("--tls_cert=" + certs.Path("server.pem"));
  o.args.push_back("--tls_key=" + certs.Path("server.key"));
  o.args.push_back("--tls_client_ca=" + certs.Path("ca.pem"));
  auto cluster = ServerCluster::Start(3, o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::JobClient>> nodes;
  const v1::JobSpec spec = ReplicatedSpec("tls", 1);
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    client::ClientOptions co = TestClientOptions((*cluster)->addresses());
    co.plaintext = false;
    co.tls_ca_file = certs.Path("ca.pem");
    co.tls_cert_file = certs.Path("client.pem");
    co.tls_key_file = certs.Path("client.key");
    auto c = client::Client::Connect(co);
    ASSERT_TRUE(c.ok()) << c.status();
    auto j = n == 0 ? (*c)->RegisterJob(spec) : (*c)->AttachJob(spec.job_id());
    ASSERT_TRUE(j.ok()) << j.status();
    clients.push_back(*std::move(c));
    nodes.push_back(*std::move(j));
  }
  constexpr int kSteps = 3;
  ReferenceModel ref(nodes[0]->spec());
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(RunStep(nodes, step).ok()) << "step " << step;
    std::vector<std::vector<float>> grads;
    for (uint32_t n = 0; n < kReplicaNodes; ++n)
      grads.push_back(NodeGradient(ref.layout(), n, step));
    ref.Step(step, grads, StepLr(step), kStepScale);
  }
  ExpectReferenceRun(nodes, ref, kSteps);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(ReplicaSumBytes((*cluster)->server(i)), 0) << "server " << i;
  }
}

TEST_F(ReplicationTest, StreamedInitialWeightsReachEveryCopy) {
  v1::JobSpec spec = ReplicatedSpec("streamed", 1);
  spec.set_streamed_init(true);
  Open(spec);
  const uint64_t used = nodes_[0]->layout().used_elems;
  std::vector<float> init(used);
  for (uint64_t i = 0; i < used; ++i) init[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  ASSERT_TRUE(nodes_[0]->InitWeights({0, used}, init.data()).ok());
  ASSERT_TRUE(RunStep(nodes_, 0).ok());
  const auto servers = cluster_->addresses();
  for (uint32_t shard = 0; shard < 3; ++shard) {
    ExpectSameCopies(servers[shard], servers[(shard + 1) % 3], "streamed", shard, 1);
  }
}

TEST_F(ReplicationTest, AServerHoldsNoCopyOfAShardItDoesNotBackUp) {
  Open(ReplicatedSpec("placed", 1));
  const auto servers = cluster_->addresses();
  // Server 0 backs up shard 2 (the ring's previous), not shard 1.
  EXPECT_TRUE(ReadCopy(servers[0], "placed", 2, 0).ok());
  auto missing = ReadCopy(servers[0], "placed", 1, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find("shard 1"), std::string::npos) << missing.status();
}

TEST_F(ReplicationTest, MoreBackupsThanTheClusterCanPlaceAreRefusedNamingReplicas) {
  auto c = client::Client::Connect(TestClientOptions(cluster_->addresses()));
  ASSERT_TRUE(c.ok()) << c.status();
  auto refused = (*c)->RegisterJob(ReplicatedSpec("too-many", 3));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("replicas: 3 backups"), std::string::npos)
      << refused.status();
  // The server refuses it too (a client that skips the check), and nothing
  // was registered: the id is free for a job that fits.
  auto stub = v1::StateService::NewStub(
      grpc::CreateChannel(cluster_->addresses()[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("zerostate-job-token", kTestJobToken);
  v1::RegisterJobRequest req;
  *req.mutable_spec() = ReplicatedSpec("too-many", 3);
  for (const auto& a : cluster_->addresses()) req.add_servers(a);
  v1::RegisterJobResponse resp;
  grpc::Status s = stub->RegisterJob(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("replicas"), std::string::npos) << s.error_message();
  Open(ReplicatedSpec("too-many", 2));
  EXPECT_EQ(nodes_[0]->spec().replicas(), 2u);
}

}  // namespace
}  // namespace zerostate::testing
