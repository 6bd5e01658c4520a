// The zerostate-worker binary as a launcher starts it: local ranks as
// separate processes exchanging through shared memory, or as threads of one
// process per node; both must end with the same bits. Bad launcher
// variables and configs are refused with a message naming them.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/server_process.h"
#include "tests/worker/fault_worker_process.h"

namespace zerostate::worker {
namespace {

using testing::ReadFileOrEmpty;
using testing::WorkerProcess;
using Proc = std::unique_ptr<WorkerProcess>;

// Starts the worker with extra environment variables and flags; its output goes to `log`.
Proc Spawn(const std::vector<std::string>& env, const std::vector<std::string>& flags,
           const std::string& log) {
  auto p = std::make_unique<WorkerProcess>(ZEROSTATE_WORKER_PATH, env, flags, log);
  EXPECT_NE(p->pid(), -1) << "cannot start " << ZEROSTATE_WORKER_PATH;
  return p;
}

// Waits for the process; returns its exit code (-1 if it did not exit normally).
int Wait(const Proc& p) { return p->Wait(absl::Minutes(5)); }

// The job token every worker process of one run shares.
constexpr char kToken[] = "ZEROSTATE_JOB_TOKEN=worker-main-test-token-0123456789abcdef";

class WorkerMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ServerProcessOptions options;
    options.binary = ZEROSTATE_SERVER_PATH;
    options.args = {"--threads=2", "--metrics_listen="};
    auto server = testing::ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    dir_ = ::testing::TempDir();
  }
  std::vector<std::string> Flags(const std::string& job) {
    return {absl::StrCat("--config=", ZEROSTATE_SOURCE_DIR, "/configs/mlp.textproto"),
            absl::StrCat("--servers=", server_->address()), "--plaintext", "--steps=5",
            "--metrics_port=0",
            absl::StrCat("--run_id=", getpid()),  // a shared-memory name no other run uses
            absl::StrCat("--job_id=", job), absl::StrCat("--dump_weights=", dir_, job, ".bin")};
  }
  std::string Path(const std::string& name) { return absl::StrCat(dir_, name); }

  std::unique_ptr<testing::ServerProcess> server_;
  std::string dir_;
};

TEST_F(WorkerMainTest, SharedMemoryProcessesMatchThreads) {
  std::vector<Proc> procs;
  for (int node = 0; node < 2; ++node) {
    for (int local = 0; local < 2; ++local) {
      procs.push_back(Spawn({absl::StrCat("RANK=", node * 2 + local), absl::StrCat("LOCAL_RANK=", local),
                             "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", absl::StrCat("NODE_RANK=", node),
                             kToken},
                            Flags("procs"), Path(absl::StrCat("procs", node, local, ".log"))));
    }
  }
  for (const Proc& p : procs) EXPECT_EQ(Wait(p), 0) << p->Log();
  procs.clear();
  for (int node = 0; node < 2; ++node) {
    auto flags = Flags("threads");
    flags.push_back("--local_threads=2");
    procs.push_back(Spawn({"WORLD_SIZE=4", absl::StrCat("NODE_RANK=", node), kToken}, flags,
                          Path(absl::StrCat("threads", node, ".log"))));
  }
  for (const Proc& p : procs) EXPECT_EQ(Wait(p), 0) << p->Log();
  const std::string a = ReadFileOrEmpty(Path("procs.bin")), b = ReadFileOrEmpty(Path("threads.bin"));
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "shared-memory processes and threads trained different weights";
  EXPECT_NE(ReadFileOrEmpty(Path("procs00.log")).find("loss: first"), std::string::npos);
}

// --timeline: each of the 5 steps' events, in the step's order, on one
// clock; an unwritable path fails the run, naming it.
TEST_F(WorkerMainTest, TheTimelineHoldsEachStepsEventsInOrder) {
  auto flags = Flags("timeline");
  flags.push_back(absl::StrCat("--timeline=", Path("timeline.jsonl")));
  Proc p = Spawn({"WORLD_SIZE=1", kToken}, flags, Path("timeline.log"));
  ASSERT_EQ(Wait(p), 0) << p->Log();
  std::ifstream in(Path("timeline.jsonl"));
  std::vector<std::string> order;  // step 2's events, in time order
  int64_t last_t = 0;
  int begins = 0;
  for (std::string line; std::getline(in, line);) {
    const int64_t t = std::stoll(line.substr(line.find("\"t_ns\":") + 7));
    EXPECT_GE(t, last_t) << line;
    last_t = t;
    const size_t w = line.find("\"what\":\"") + 8;
    const std::string what = line.substr(w, line.find('"', w) - w);
    begins += what == "worker_step_begin";
    if (line.find("\"a\":2,") != std::string::npos &&
        (what == "worker_step_begin" || what == "compute_end" || what == "pushes_acked" ||
         what == "step_sent" || what == "step_answered")) {
      order.push_back(what);
    }
  }
  EXPECT_EQ(begins, 5);
  // The Step is answered after the pushes; the next step may begin before
  // (the Step on its own thread, the landing in the next forward).
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(order[0], "worker_step_begin");
  EXPECT_EQ(order[1], "compute_end");
  EXPECT_EQ(order[2], "pushes_acked");
  EXPECT_EQ(order[3], "step_sent");
  EXPECT_EQ(order[4], "step_answered");

  flags = Flags("timeline-bad");
  flags.push_back("--timeline=/nonexistent-dir/timeline.jsonl");
  Proc bad = Spawn({"WORLD_SIZE=1", kToken}, flags, Path("timeline-bad.log"));
  EXPECT_EQ(Wait(bad), 1);
  EXPECT_NE(bad->Log().find("/nonexistent-dir/timeline.jsonl"), std::string::npos) << bad->Log();
}

TEST_F(WorkerMainTest, BadLauncherVariableIsNamed) {
  Proc p = Spawn({"WORLD_SIZE=3", "LOCAL_WORLD_SIZE=2"}, Flags("bad-env"), Path("bad-env.log"));
  EXPECT_EQ(Wait(p), 2);
  EXPECT_NE(p->Log().find("WORLD_SIZE"), std::string::npos) << p->Log();
}

TEST_F(WorkerMainTest, RanksInOtherProcessesNeedTheTokenVariable) {
  Proc p = Spawn({"RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1", "NODE_RANK=0"},
                 Flags("no-token"), Path("no-token.log"));
  EXPECT_EQ(Wait(p), 2);
  EXPECT_NE(p->Log().find("ZEROSTATE_JOB_TOKEN: not set, and 1 ranks run in other processes"),
            std::string::npos)
      << p->Log();
}

TEST_F(WorkerMainTest, BadConfigKeyIsNamed) {
  const std::string cfg = Path("bad.json");
  std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true, "loss_scael": 8}})";
  auto flags = Flags("bad-config");
  flags[0] = absl::StrCat("--config=", cfg);
  Proc p = Spawn({}, flags, Path("bad-config.log"));
  EXPECT_EQ(Wait(p), 2);
  EXPECT_NE(p->Log().find("fp16.loss_scael"), std::string::npos) << p->Log();
}

// Before: civetweb's CivetException escaped main and the worker dumped core.
TEST_F(WorkerMainTest, AMetricsPortInUseIsAClearError) {
  int port = 0;
  const int fd = testing::ListenOnLoopback(&port);
  ASSERT_GE(fd, 0) << strerror(errno);
  auto flags = Flags("metrics-in-use");
  for (auto& f : flags) {
    if (f == "--metrics_port=0") f = absl::StrCat("--metrics_port=", port);
  }
  Proc p = Spawn({kToken}, flags, Path("metrics-in-use.log"));
  EXPECT_EQ(Wait(p), 2) << p->Log();
  EXPECT_NE(p->Log().find(absl::StrCat("metrics_port: cannot listen on 127.0.0.1:", port)),
            std::string::npos)
      << p->Log();
  close(fd);
}

}  // namespace
}  // namespace zerostate::worker
