// Failover of replicated shards with real server processes: a
// job of two nodes on three servers with one backup per shard; one server
// is SIGKILLed mid-run, each server once, in the middle of a step (after
// node 0's pushes, before GradStats) or between two steps. The backup
// takes its shards over, both nodes move to it, the interrupted step is
// applied exactly once, and the run ends with the weights of a run without
// the fault, bit for bit, at the version of a run without the fault (no
// rollback).
#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

constexpr int kSteps = 6;
constexpr uint64_t kKillStep = 3;

enum class Phase { kBeforeStats, kBetweenSteps };

struct Param {
  int server;
  Phase phase;
  // JobSpec.speculative_step: node 0 sends each step ahead (StepAhead)
  // before its push; killed between steps, the StepAhead is the first call
  // to fail over.
  bool speculative = false;
};

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat("server", info.param.server,
                      info.param.phase == Phase::kBeforeStats ? "_before_stats" : "_between_steps",
                      info.param.speculative ? "_speculative" : "");
}

class FailoverTest : public ::testing::TestWithParam<Param> {};

TEST_P(FailoverTest, TheBackupTakesOverAndTheRunEndsBitIdenticalWithoutRollback) {
  const Param p = GetParam();
  // Streamed steps' sums on two data plane connections per backup.
  ServerProcessOptions o = TestServerOptions();
  o.args.push_back("--replica_lanes=2");
  auto cluster = ServerCluster::Start(3, o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::JobSpec spec = ReplicatedSpec(absl::StrCat("failover", p.server), 1);
  spec.set_speculative_step(p.speculative);
  auto run = StartNodes(spec, (*cluster)->addresses());
  ASSERT_TRUE(run.ok()) << run.status();
  auto& nodes = run->nodes;
  ReferenceModel ref(nodes[0]->spec());
  std::vector<std::vector<float>> grads(kReplicaNodes);
  auto kill = [&] { ASSERT_TRUE((*cluster)->server(p.server).Kill().ok()); };
  for (uint64_t step = 0; step < kSteps; ++step) {
    if (step == kKillStep && p.phase == Phase::kBetweenSteps) kill();
    std::function<void()> after_push;
    if (step == kKillStep && p.phase == Phase::kBeforeStats) after_push = kill;
    absl::Status s = TrainerStep(nodes, step, grads, after_push);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
    ref.Step(step, grads, StepLr(step), kStepScale);
  }
  EXPECT_FALSE((*cluster)->server(p.server).running()) << "the server was not killed";
  // Every step applied once, none rolled back: the version a run without
  // the fault reaches, and its weights.
  ExpectReferenceRun(nodes, ref, kSteps);
}

// The int8 wire (JobSpec.gradient_wire, weight_wire) through a failover
// mid-step: what a backup gets again is what was first sent (each push
// encoded once, its error feedback moved once), so the run ends with the
// masters of the same run without the fault, bit for bit.
TEST(Int8WireFailoverTest, TheRunEndsBitIdenticalToOneWithoutTheFault) {
  auto masters = [](bool kill) {
    std::vector<float> master;
    auto cluster = ServerCluster::Start(3, TestServerOptions());
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return master;
    v1::JobSpec spec = ReplicatedSpec("int8-failover", 1);
    spec.set_gradient_wire(v1::WIRE_INT8);
    spec.set_weight_wire(v1::WIRE_INT8);
    // The TCP data plane: the same-host one moves the plain dtypes.
    auto run = StartNodes(spec, (*cluster)->addresses(), nullptr,
                          [](client::ClientOptions& o) { o.data_shm = false; });
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return master;
    std::vector<std::vector<float>> grads(kReplicaNodes);
    for (uint64_t step = 0; step < kSteps; ++step) {
      std::function<void()> after_push;
      if (kill && step == kKillStep) {
        after_push = [&] { EXPECT_TRUE((*cluster)->server(1).Kill().ok()); };
      }
      absl::Status s = TrainerStep(run->nodes, step, grads, after_push);
      EXPECT_TRUE(s.ok()) << "step " << step << ": " << s;
      if (!s.ok()) return master;
    }
    master.resize(run->nodes[0]->layout().total_elems);
    EXPECT_TRUE(run->nodes[1]->GatherMaster(kSteps, {0, master.size()}, master.data()).ok());
    return master;
  };
  const std::vector<float> plain_run = masters(false);
  const std::vector<float> killed_run = masters(true);
  ASSERT_EQ(killed_run.size(), plain_run.size());
  ASSERT_FALSE(plain_run.empty());
  ExpectBitIdentical(killed_run.data(), plain_run.data(), plain_run.size(), "master");
}

// More servers than blocks: one shard holds no block. Its server
// SIGKILLed after node 0's pushes, the calls that reach every shard
// (GradStats, Step) move the shard to its backup, which reports version 0
// (it has no block to count steps on) and takes it: the run goes on and
// ends as one without the fault.
TEST(EmptyShardFailoverTest, AShardOfNoBlockFailsOverAndTheRunEndsBitIdentical) {
  auto cluster = ServerCluster::Start(3, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::JobSpec spec = ReplicatedSpec("empty-shard", 1);
  spec.set_block_elems(2048);  // 2 blocks over 3 servers
  auto run = StartNodes(spec, (*cluster)->addresses());
  ASSERT_TRUE(run.ok()) << run.status();
  auto& nodes = run->nodes;
  int empty = -1;
  for (uint32_t shard = 0; shard < 3; ++shard) {
    if (ShardBlocks(nodes[0]->layout().num_blocks(), 3, shard).empty()) empty = shard;
  }
  ASSERT_GE(empty, 0) << nodes[0]->layout().num_blocks() << " blocks leave no shard empty";
  ReferenceModel ref(nodes[0]->spec());
  std::vector<std::vector<float>> grads(kReplicaNodes);
  for (uint64_t step = 0; step < kSteps; ++step) {
    std::function<void()> after_push;
    if (step == kKillStep) {
      after_push = [&] { ASSERT_TRUE((*cluster)->server(empty).Kill().ok()); };
    }
    absl::Status s = TrainerStep(nodes, step, grads, after_push);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
    ref.Step(step, grads, StepLr(step), kStepScale);
  }
  EXPECT_FALSE((*cluster)->server(empty).running()) << "the server was not killed";
  ExpectReferenceRun(nodes, ref, kSteps);
}

INSTANTIATE_TEST_SUITE_P(Kills, FailoverTest,
                         ::testing::Values(Param{0, Phase::kBeforeStats},
                                           Param{1, Phase::kBeforeStats},
                                           Param{2, Phase::kBeforeStats},
                                           Param{1, Phase::kBetweenSteps},
                                           Param{0, Phase::kBeforeStats, true},
                                           Param{1, Phase::kBetweenSteps, true}),
                         Name);

}  // namespace
}  // namespace zerostate::testing
