// Re-replication of replicated shards with real server
// processes: a job of two nodes on three servers with one backup per
// shard. Server 1 is SIGKILLed (its shard fails over to server 2, and
// shard 0 loses its backup), the run goes on under-replicated, server 1
// is restarted empty; the next step finds each copy there lost and has
// its server probed off the step's path, and once it answers the primary
// catches the copy up in the background from its state after that step
// (ReplicaService.Seed, then the steps that follow); once those are
// across, the copy rejoins at the next step: server 1's copies are
// bit-identical to their primaries' again, as the metrics say. Then the primary of the
// shard whose only other copy is the caught-up one is SIGKILLed, and the
// run ends with the weights of a run without faults, with no rollback.
#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

constexpr uint64_t kSteps = 12;
constexpr uint64_t kKillBackupStep = 2;  // server 1 killed before this step
constexpr uint64_t kRestartStep = 4;     // and restarted before this one
constexpr uint64_t kKillPrimaryStep = 7;  // server 2 killed before this one

// The job steps speculatively (JobSpec.speculative_step, StepAhead before
// the pushes) or not: a speculated block's state at the step's version is
// the one it keeps aside, and that is what the catch-up must send.
class CatchupTest : public ::testing::TestWithParam<bool> {};

TEST_P(CatchupTest, ARestartedServerCatchesUpAndThenTakesOverWithoutRollback) {
  auto cluster = ServerCluster::Start(3, MeteredServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ServerCluster& c = **cluster;
  const std::vector<std::string> addr = c.addresses();
  v1::JobSpec spec = ReplicatedSpec("catchup", 1);
  spec.set_speculative_step(GetParam());
  auto run = StartNodes(spec, addr);
  ASSERT_TRUE(run.ok()) << run.status();
  auto& nodes = run->nodes;
  ReferenceModel ref(nodes[0]->spec());
  std::vector<std::vector<float>> grads(kReplicaNodes);
  // Blocks of shards 0 and 1 (each copy's block count).
  auto shard0 = ReadCopy(addr[0], spec.job_id(), 0, 0);
  auto shard1 = ReadCopy(addr[1], spec.job_id(), 1, 0);
  ASSERT_TRUE(shard0.ok()) << shard0.status();
  ASSERT_TRUE(shard1.ok()) << shard1.status();
  const double blocks0 = static_cast<double>(shard0->versions.size());
  const double blocks1 = static_cast<double>(shard1->versions.size());
  ASSERT_GT(blocks0, 0);
  ASSERT_GT(blocks1, 0);
  for (uint64_t step = 0; step < kSteps; ++step) {
    if (step == kKillBackupStep) { ASSERT_TRUE(c.server(1).Kill().ok()); }
    if (step == kRestartStep) {
      // Shard 0 lost its backup (server 1); shard 1 its primary, now server
      // 2, whose only other copy was server 1.
      EXPECT_EQ(ServerMetric(c.server(0), "zerostate_under_replicated_blocks"), blocks0);
      EXPECT_EQ(ServerMetric(c.server(2), "zerostate_under_replicated_blocks"), blocks1);
      EXPECT_EQ(ServerMetric(c.server(0), "zerostate_catchup_bytes_total"), 0);
      ASSERT_TRUE(c.server(1).Restart().ok());
    }
    if (step == kKillPrimaryStep) {
      // Rejoined at the first step after the seeds' acknowledgements (one
      // step on a fast build, more under the sanitizers: the steps taken
      // here count towards kSteps).
      uint64_t next = step;
      ASSERT_NO_FATAL_FAILURE(
          TrainUntilReplicated(nodes, ref, &next, {&c.server(0), &c.server(2)}, kSteps - 2 - step));
      step = next;
      // Caught up: bit-identical to the primaries since.
      ExpectSameCopies(addr[0], addr[1], spec.job_id(), 0, step);
      ExpectSameCopies(addr[2], addr[1], spec.job_id(), 1, step);
      EXPECT_EQ(ServerMetric(c.server(0), "zerostate_under_replicated_blocks"), 0);
      EXPECT_EQ(ServerMetric(c.server(2), "zerostate_under_replicated_blocks"), 0);
      // What was sent: the whole shard's state, once.
      auto state0 = ReadCopy(addr[0], spec.job_id(), 0, step);
      auto state1 = ReadCopy(addr[2], spec.job_id(), 1, step);
      ASSERT_TRUE(state0.ok()) << state0.status();
      ASSERT_TRUE(state1.ok()) << state1.status();
      EXPECT_EQ(ServerMetric(c.server(0), "zerostate_catchup_bytes_total"),
                static_cast<double>(state0->state.size()));
      EXPECT_EQ(ServerMetric(c.server(2), "zerostate_catchup_bytes_total"),
                static_cast<double>(state1->state.size()));
      // Server 2 serves shard 1 and its own shard 2: shard 1's only other
      // copy is the caught-up one on server 1.
      ASSERT_TRUE(c.server(2).Kill().ok());
    }
    absl::Status s = TrainerStep(nodes, step, grads, nullptr);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
    ref.Step(step, grads, StepLr(step), kStepScale);
    if (step == kRestartStep) {
      // The probes found server 1 back: its copies seeded at the version
      // after this step (the shard's state read between two passes).
      for (uint32_t shard : {0u, 1u}) {
        auto seeded = AwaitCopy(addr[1], spec.job_id(), shard, step + 1);
        ASSERT_TRUE(seeded.ok()) << seeded.status();
      }
    }
    if (step == kRestartStep + 1) {
      // The catch-ups run in the background: the seeds and this step
      // cross before the next step, whose copies rejoin then.
      for (int primary : {0, 2}) {
        double backlog = 0;
        EXPECT_TRUE(AwaitMetric(c.server(primary), "zerostate_catchup_backlog_bytes", 0, &backlog))
            << "server " << primary << "'s catch-up still holds " << backlog << " bytes";
      }
    }
  }
  ExpectReferenceRun(nodes, ref, kSteps);
  // The copy that took shard 1 over is the caught-up one; and shard 0's
  // copies are still identical.
  ExpectSameCopies(addr[0], addr[1], spec.job_id(), 0, kSteps);
}

INSTANTIATE_TEST_SUITE_P(Steps, CatchupTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "speculative" : "plain";
                         });

}  // namespace
}  // namespace zerostate::testing
