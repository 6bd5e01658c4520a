// Rank 0 cannot register the job (real servers, real zerostate-worker
// processes: 2 nodes of 2 local ranks as threads): it still answers the
// other ranks' rendezvous, so every rank exits 1 at once with the reason,
// naming rank 0, instead of waiting for it until the rendezvous' deadline.
// Cases: the job id taken by another token, the same id with another
// model, and a job over the servers' RAM budget.
#include <fstream>

#include "tests/worker/kill_fixture.h"

namespace zerostate::testing {
namespace {

class StartFaultTest : public KillFixture {
 protected:
  // Runs both nodes of `job` with `env` (a token) and `extra` flags; every
  // node must fail, node 1 naming rank 0 and `reason`, node 0 `reason`.
  void ExpectEveryRankFails(const std::string& job, const std::string& token,
                            const std::vector<std::string>& extra, const std::string& reason) {
    std::vector<std::string> flags = Flags(job, extra, "refused");
    flags.push_back("--local_threads=2");
    flags.push_back("--peer_timeout_seconds=15");
    std::vector<std::unique_ptr<WorkerProcess>> nodes;
    for (int node = 0; node < 2; ++node) {
      nodes.push_back(Start({"WORLD_SIZE=4", absl::StrCat("NODE_RANK=", node), token}, flags,
                            absl::StrCat(job, "refused", node)));
    }
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 1) << n->Log();
    const std::string log0 = nodes[0]->Log(), log1 = nodes[1]->Log();
    EXPECT_NE(log0.find(reason), std::string::npos) << log0;
    EXPECT_NE(log1.find("rank 0 (node 0, local rank 0) could not register job " + job),
              std::string::npos)
        << log1;
    EXPECT_NE(log1.find(reason), std::string::npos) << log1;
  }
};

TEST_F(StartFaultTest, JobIdTakenByAnotherToken) {
  auto first = StartNodes("taken", {"--steps=2"});
  for (auto& n : first) ASSERT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
  ExpectEveryRankFails("taken", "ZEROSTATE_JOB_TOKEN=another-token-0123456789abcdef0123456789",
                       {}, "RegisterJob to " + cluster_->server(0).address());
}

TEST_F(StartFaultTest, SameJobIdWithAnotherModel) {
  auto first = StartNodes("remodel", {"--steps=2"});
  for (auto& n : first) ASSERT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
  std::string config = ReadFileOrEmpty(absl::StrCat(ZEROSTATE_SOURCE_DIR, "/configs/mlp.textproto"));
  const std::string hidden = "hidden: [256, 256, 128]";
  ASSERT_NE(config.find(hidden), std::string::npos);
  config.replace(config.find(hidden), hidden.size(), "hidden: [256, 128]");
  const std::string path = absl::StrCat(dir_, "other_model.textproto");
  std::ofstream(path) << config;
  ExpectEveryRankFails("remodel", Token("remodel"), {"--config=" + path}, "ALREADY_EXISTS");
}

TEST_F(StartFaultTest, JobOverTheRamBudget) {
  ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {"--threads=2", "--metrics_listen=", "--ram_budget_bytes=65536"};
  auto small = ServerCluster::Start(2, options);
  ASSERT_TRUE(small.ok()) << small.status();
  ExpectEveryRankFails("big", Token("big"),
                       {"--servers=" + absl::StrJoin((*small)->addresses(), ",")},
                       "RESOURCE_EXHAUSTED");
}

}  // namespace
}  // namespace zerostate::testing
