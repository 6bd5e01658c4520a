// Failover of replicated shards (issue 19) with real server processes: a
// job of two nodes on three servers with one backup per shard; one server
// is SIGKILLed mid-run, each server once, in the middle of a step (after
// node 0's pushes, before GradStats) or between two steps. The backup
// takes its shards over, both nodes move to it, the interrupted step is
// applied exactly once, and the run ends with the weights of a run without
// the fault, bit for bit, at the version of a run without the fault (no
// rollback).
#include <functional>

#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

constexpr int kSteps = 6;
constexpr uint64_t kKillStep = 3;

enum class Phase { kBeforeStats, kBetweenSteps };

struct Param {
  int server;
  Phase phase;
};

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat("server", info.param.server,
                      info.param.phase == Phase::kBeforeStats ? "_before_stats" : "_between_steps");
}

// One step as the nodes of a trainer run it: every node pushes its
// gradient, then gathers the new version; node 0 meanwhile asks the
// statistics and steps. `after_push` runs on node 0 once its push is in.
absl::Status TrainerStep(std::vector<std::unique_ptr<client::JobClient>>& nodes, uint64_t step,
                         std::vector<std::vector<float>>& grads,
                         const std::function<void()>& after_push) {
  std::vector<absl::Status> result(nodes.size());
  std::vector<std::thread> threads;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    threads.emplace_back([&, n] {
      client::JobClient& job = *nodes[n];
      const uint64_t used = job.layout().used_elems;
      // The buffer stays as pushed until the new version is gathered.
      grads[n] = NodeGradient(job.layout(), n, step);
      absl::Status s = job.Push(step, n, {0, used}, grads[n].data(), v1::DTYPE_FP32);
      if (s.ok() && n == 0) {
        if (after_push) after_push();
        auto stats = job.GradStats(step);
        s = stats.ok() ? job.Step(step, StepLr(step), kStepScale, false) : stats.status();
      }
      std::vector<float> weights(job.layout().total_elems);
      if (s.ok()) {
        s = job.Gather(step + 1, {0, job.layout().total_elems}, weights.data(), v1::DTYPE_FP32);
      }
      result[n] = s;
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (!result[n].ok())
      return absl::Status(result[n].code(), absl::StrCat("node ", n, ": ", result[n].message()));
  }
  return absl::OkStatus();
}

class FailoverTest : public ::testing::TestWithParam<Param> {};

TEST_P(FailoverTest, TheBackupTakesOverAndTheRunEndsBitIdenticalWithoutRollback) {
  const Param p = GetParam();
  auto cluster = ServerCluster::Start(3, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::JobSpec spec = ReplicatedSpec(absl::StrCat("failover", p.server), 1);
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::JobClient>> nodes;
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    client::ClientOptions o = TestClientOptions((*cluster)->addresses());
    o.failover_wait = std::chrono::milliseconds(500);
    auto c = client::Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    auto j = n == 0 ? (*c)->RegisterJob(spec) : (*c)->AttachJob(spec.job_id());
    ASSERT_TRUE(j.ok()) << j.status();
    clients.push_back(*std::move(c));
    nodes.push_back(*std::move(j));
  }
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
  auto version = nodes[1]->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, static_cast<uint64_t>(kSteps));
  const uint64_t total = ref.layout().total_elems;
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    std::vector<float> master(total);
    ASSERT_TRUE(nodes[n]->GatherMaster(kSteps, {0, total}, master.data()).ok());
    ExpectBitIdentical(master.data(), ref.master(), total, absl::StrCat("node ", n, "'s master"));
  }
}

INSTANTIATE_TEST_SUITE_P(Kills, FailoverTest,
                         ::testing::Values(Param{0, Phase::kBeforeStats},
                                           Param{1, Phase::kBeforeStats},
                                           Param{2, Phase::kBeforeStats},
                                           Param{1, Phase::kBetweenSteps}),
                         Name);

}  // namespace
}  // namespace zerostate::testing
