// Crashes under real zerostate-worker processes (2 nodes of 2 local ranks
// as threads) training through 2 real zerostate-server processes:
//   - a server killed with SIGKILL mid-training and restarted on its port:
//     the coordinator restores the last checkpoint on every server, every
//     rank rolls back to it, and the run ends with the weights of a run
//     without the fault, bit for bit;
//   - the same without checkpoints: the run ends with an error naming the
//     lost server instead of training on a partial state.
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/server_process.h"
#include "tests/worker/fault_worker_process.h"

namespace zerostate::testing {
namespace {

constexpr absl::Duration kRunTimeout = absl::Seconds(180);

class KillRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerProcessOptions options;
    options.binary = ZEROSTATE_SERVER_PATH;
    options.args = {"--threads=2", "--metrics_listen="};
    auto cluster = ServerCluster::Start(2, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    dir_ = absl::StrCat(::testing::TempDir(), "kill_restart_", getpid(), "/");
    ASSERT_EQ(system(absl::StrCat("mkdir -p ", dir_, "ckpt").c_str()), 0);
  }

  // Flags of node `node` of run `job` (2 nodes of 2 local threads).
  std::vector<std::string> Flags(const std::string& job, std::vector<std::string> extra) {
    std::vector<std::string> flags = {
        absl::StrCat("--config=", ZEROSTATE_SOURCE_DIR, "/configs/mlp.textproto"),
        absl::StrCat("--servers=", absl::StrJoin(cluster_->addresses(), ",")),
        "--plaintext", "--steps=60", "--metrics_port=0", "--local_threads=2",
        absl::StrCat("--run_id=", job, getpid()), absl::StrCat("--job_id=", job),
        absl::StrCat("--dump_weights=", dir_, job, ".bin")};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }

  // Starts both nodes of `job`.
  std::vector<std::unique_ptr<WorkerProcess>> StartNodes(const std::string& job,
                                                         const std::vector<std::string>& extra) {
    std::vector<std::unique_ptr<WorkerProcess>> nodes;
    for (int node = 0; node < 2; ++node) {
      nodes.push_back(std::make_unique<WorkerProcess>(
          ZEROSTATE_WORKER_PATH, std::vector<std::string>{"WORLD_SIZE=4", absl::StrCat("NODE_RANK=", node),
                                   absl::StrCat("ZEROSTATE_JOB_TOKEN=token-of-", job, "-0123456789abcdef0123456789")},
          Flags(job, extra), absl::StrCat(dir_, job, node, ".log")));
      EXPECT_GT(nodes.back()->pid(), 0);
    }
    return nodes;
  }

  // Runs `job` to the end without faults; returns its final weights.
  std::string RunClean(const std::string& job) {
    auto nodes = StartNodes(job, {});
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
    return ReadFileOrEmpty(absl::StrCat(dir_, job, ".bin"));
  }

  // Waits until rank 0 has finished step `step`, then kills server
  // `victim` and restarts it on the same port, empty.
  void CrashServerAfterStep(WorkerProcess& node0, int step, int victim = 1) {
    ASSERT_TRUE(node0.AwaitLog(absl::StrCat("step ", step, " loss"), kRunTimeout)) << node0.Log();
    ASSERT_TRUE(cluster_->server(victim).Kill().ok());
    ASSERT_TRUE(cluster_->server(victim).Restart().ok());
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::string dir_;
};

TEST_F(KillRestartTest, KilledServerIsRolledBackAndTheRunEndsBitIdentical) {
  const std::string reference = RunClean("clean");
  ASSERT_FALSE(reference.empty());
  // Server 1, then server 0 (which also holds the rendezvous), each killed
  // twice in one run: after step 12 and after step 31.
  for (int victim : {1, 0}) {
    SCOPED_TRACE(absl::StrCat("server ", victim, " killed"));
    const std::string job = absl::StrCat("crash", victim);
    auto nodes = StartNodes(job, {"--checkpoint_every=5", absl::StrCat("--checkpoint_dir=", dir_, "ckpt")});
    CrashServerAfterStep(*nodes[0], 12, victim);
    CrashServerAfterStep(*nodes[0], 31, victim);
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
    // The faults hit mid-training: rank 0 rolled back to a checkpoint twice.
    const std::string log = nodes[0]->Log();
    const size_t first = log.find("restored");
    ASSERT_NE(first, std::string::npos) << log;
    EXPECT_NE(log.find("restored", first + 1), std::string::npos) << log;
    const std::string crashed = ReadFileOrEmpty(absl::StrCat(dir_, job, ".bin"));
    EXPECT_EQ(crashed.size(), reference.size());
    EXPECT_TRUE(crashed == reference) << "the rolled-back run ended with other weights";
  }
}

TEST_F(KillRestartTest, KilledServerWithoutCheckpointsEndsTheRunNamingIt) {
  auto nodes = StartNodes("nockpt", {});
  const std::string victim = cluster_->server(1).address();
  CrashServerAfterStep(*nodes[0], 12);
  std::string logs;
  for (auto& n : nodes) {
    EXPECT_EQ(n->Wait(kRunTimeout), 1) << n->Log();
    logs += n->Log();
  }
  // The failing ranks name the server that lost the job.
  EXPECT_NE(logs.find(victim), std::string::npos) << logs;
}

}  // namespace
}  // namespace zerostate::testing
