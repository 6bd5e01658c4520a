// Shared by the crash tests: 2 real zerostate-server processes and runs of
// the zerostate-worker binary as 2 nodes of 2 local ranks (threads), each
// node a process, on configs/mlp.textproto.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/server_process.h"
#include "tests/worker/fault_worker_process.h"

namespace zerostate::testing {

// A bound against hangs, not a speed target.
inline constexpr absl::Duration kRunTimeout = absl::Seconds(180);

class KillFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerProcessOptions options;
    options.binary = ZEROSTATE_SERVER_PATH;
    options.args = {"--threads=2", "--metrics_listen="};
    auto cluster = ServerCluster::Start(2, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    dir_ = absl::StrCat(::testing::TempDir(), "kill_", getpid(), "/");
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir_, "ckpt").c_str()), 0);
  }

  // Starts both nodes of run `run` of job `job`, each a process of 2 local
  // threads; rank 0 dumps the final weights to Weights(job).
  std::vector<std::unique_ptr<WorkerProcess>> StartNodes(const std::string& job,
                                                         const std::vector<std::string>& extra,
                                                         const std::string& run = "first") {
    std::vector<std::string> flags = Flags(job, extra, run);
    flags.push_back("--local_threads=2");
    std::vector<std::unique_ptr<WorkerProcess>> nodes;
    for (int node = 0; node < 2; ++node) {
      nodes.push_back(Start({"WORLD_SIZE=4", absl::StrCat("NODE_RANK=", node), Token(job)}, flags,
                            absl::StrCat(job, run, node)));
    }
    return nodes;
  }

  // The same with every rank a process (local ranks share memory).
  std::vector<std::unique_ptr<WorkerProcess>> StartRanks(const std::string& job,
                                                         const std::vector<std::string>& extra,
                                                         const std::string& run = "first") {
    std::vector<std::unique_ptr<WorkerProcess>> ranks;
    for (int rank = 0; rank < 4; ++rank) {
      ranks.push_back(Start({absl::StrCat("RANK=", rank), absl::StrCat("LOCAL_RANK=", rank % 2),
                             "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2",
                             absl::StrCat("NODE_RANK=", rank / 2), Token(job)},
                            Flags(job, extra, run), absl::StrCat(job, run, "rank", rank)));
    }
    return ranks;
  }

  std::vector<std::string> Flags(const std::string& job, const std::vector<std::string>& extra,
                                 const std::string& run) {
    std::vector<std::string> flags = {
        absl::StrCat("--config=", ZEROSTATE_SOURCE_DIR, "/configs/mlp.textproto"),
        absl::StrCat("--servers=", absl::StrJoin(cluster_->addresses(), ",")),
        "--plaintext", absl::StrCat("--steps=", steps_), "--metrics_port=0",
        absl::StrCat("--run_id=", job, run, getpid()), absl::StrCat("--job_id=", job),
        absl::StrCat("--dump_weights=", dir_, job, ".bin")};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }
  static std::string Token(const std::string& job) {
    return absl::StrCat("ZEROSTATE_JOB_TOKEN=token-of-", job, "-0123456789abcdef0123456789");
  }
  std::unique_ptr<WorkerProcess> Start(const std::vector<std::string>& env,
                                       const std::vector<std::string>& flags,
                                       const std::string& log) {
    auto p = std::make_unique<WorkerProcess>(ZEROSTATE_WORKER_PATH, env, flags,
                                             absl::StrCat(dir_, log, ".log"));
    EXPECT_GT(p->pid(), 0);
    return p;
  }

  std::string Weights(const std::string& job) { return ReadFileOrEmpty(absl::StrCat(dir_, job, ".bin")); }

  // Runs `job` to the end without faults; returns its final weights.
  std::string RunClean(const std::string& job) {
    auto nodes = StartNodes(job, {});
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
    return Weights(job);
  }

  // Waits until rank 0 has finished step `step`, then kills server
  // `victim` and restarts it on the same port, empty.
  void CrashServerAfterStep(WorkerProcess& node0, int step, int victim = 1) {
    ASSERT_TRUE(node0.AwaitLog(absl::StrCat("step ", step, " loss"), kRunTimeout)) << node0.Log();
    ASSERT_TRUE(cluster_->server(victim).Kill().ok());
    ASSERT_TRUE(cluster_->server(victim).Restart().ok());
  }

  std::string CheckpointFlag() const { return absl::StrCat("--checkpoint_dir=", dir_, "ckpt"); }

  std::unique_ptr<ServerCluster> cluster_;
  std::string dir_;
  // The steps of every run (--steps). 25 is past every kill point of step
  // 12 or 15 with room after it: the rollback to the checkpoint of step 10
  // and two more checkpoint intervals (--checkpoint_every=5) of training
  // that must match the clean run's. Tests that kill later raise it before
  // they start a run; each kill costs the clean reference run these steps
  // too, so a longer run only makes the test slower.
  int steps_ = 25;
};

}  // namespace zerostate::testing
