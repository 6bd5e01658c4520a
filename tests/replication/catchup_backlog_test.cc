// A lost copy's catch-up runs in the background
// (server/replication/catch_up.h), with real server processes: a job of two
// nodes on three servers with one backup per shard. Server 1 is SIGKILLed
// and restarted empty; the servers run with --test_seed_hold, so the seeds
// of its copies stop after their first block until the test lets them go.
// Meanwhile the job keeps stepping: the steps are acknowledged without the
// copy and kept in its catch-up's backlog (zerostate_catchup_backlog_bytes),
// which crosses once the seed did; the copy then rejoins at the next step,
// bit-identical to its primary, and the run ends with the weights of a run
// without faults. A backlog past --catchup_backlog_bytes drops the
// catch-up, and a later step starts another.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/job_spec.h"
#include "common/shard_map.h"
#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

constexpr uint64_t kLostStep = 2;     // server 1 killed before this step
constexpr uint64_t kRestartStep = 3;  // and restarted before this one
constexpr char kBacklog[] = "zerostate_catchup_backlog_bytes";
constexpr char kUnder[] = "zerostate_under_replicated_blocks";
constexpr char kCatchupBytes[] = "zerostate_catchup_bytes_total";

// Bytes of the summed gradients of one step of `shard` of `spec` on
// `servers` servers (what a catch-up's backlog holds of a step, with its
// request).
uint64_t ShardSumBytes(const v1::JobSpec& spec, uint32_t servers, uint32_t shard) {
  auto normalized = NormalizeJobSpec(spec);
  EXPECT_TRUE(normalized.ok()) << normalized.status();
  const Layout layout = LayoutOf(*normalized);
  uint64_t bytes = 0;
  const Range blocks = ShardBlocks(layout.num_blocks(), servers, shard);
  for (uint64_t b = blocks.begin; b < blocks.end; ++b) {
    const uint64_t begin = b * layout.block_elems;
    if (begin < layout.used_elems) {
      bytes += std::min<uint64_t>(layout.block_elems, layout.used_elems - begin) * sizeof(float);
    }
  }
  return bytes;
}

class CatchupBacklogTest : public ::testing::Test {
 protected:
  // Three servers (metrics on, seeds held after their first block, `args`
  // added), the job, and steps [0, kRestartStep) with server 1 killed
  // before kLostStep and restarted empty after them.
  void StartAndLoseServer1(const std::string& job, const std::vector<std::string>& args = {},
                           const std::string& phase = "blocks") {
    hold_ = TestDirectory("seedhold");
    for (const std::string& left : {std::string("release"), phase + "-shard0", phase + "-shard1"}) {
      std::remove((hold_ + "/" + left).c_str());  // of an earlier run (--gtest_repeat)
    }
    ServerProcessOptions o = MeteredServerOptions();
    o.args.push_back("--test_seed_hold=" + phase + ":" + hold_);
    o.args.insert(o.args.end(), args.begin(), args.end());
    auto cluster = ServerCluster::Start(3, o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    addr_ = cluster_->addresses();
    spec_ = ReplicatedSpec(job, 1);
    auto run = StartNodes(spec_, addr_);
    ASSERT_TRUE(run.ok()) << run.status();
    run_ = *std::move(run);
    ref_ = std::make_unique<ReferenceModel>(run_.nodes[0]->spec());
    auto shard0 = ReadCopy(addr_[0], job, 0, 0);
    ASSERT_TRUE(shard0.ok()) << shard0.status();
    blocks0_ = static_cast<double>(shard0->versions.size());
    ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, 0, kLostStep));
    ASSERT_TRUE(server(1).Kill().ok());
    ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, kLostStep, kRestartStep));
    EXPECT_EQ(ServerMetric(server(0), kUnder), blocks0_);
    ASSERT_TRUE(server(1).Restart().ok());
  }

  // Lets the held seeds go, then steps from `step` until both primaries
  // of server 1's copies (servers 0 and 2) count them live, each step once
  // their backlogs are across (at most 3 steps); returns the next step.
  uint64_t ReleaseAndRejoin(uint64_t step) {
    Touch(hold_ + "/release");
    for (int tries = 0; tries < 3; ++tries) {
      for (int primary : {0, 2}) {
        double left = 0;
        EXPECT_TRUE(AwaitMetric(server(primary), kBacklog, 0, &left))
            << "server " << primary << "'s catch-up still holds " << left << " bytes";
      }
      TrainSteps(run_.nodes, *ref_, step, step + 1);
      ++step;
      if (ServerMetric(server(0), kUnder) == 0 && ServerMetric(server(2), kUnder) == 0) break;
    }
    return step;
  }

  // Both copies of shards 0 and 1 bit-identical at `version`, live, shard
  // 0's seeded once; the run at the reference's weights after two more steps.
  void ExpectCaughtUp(uint64_t version) {
    EXPECT_EQ(ServerMetric(server(0), kUnder), 0);
    EXPECT_EQ(ServerMetric(server(2), kUnder), 0);
    ExpectSameCopies(addr_[0], addr_[1], spec_.job_id(), 0, version);
    ExpectSameCopies(addr_[2], addr_[1], spec_.job_id(), 1, version);
    auto state0 = ReadCopy(addr_[0], spec_.job_id(), 0, version);
    ASSERT_TRUE(state0.ok()) << state0.status();
    EXPECT_EQ(ServerMetric(server(0), kCatchupBytes), static_cast<double>(state0->state.size()));
    ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, version, version + 2));
    ExpectSameCopies(addr_[0], addr_[1], spec_.job_id(), 0, version + 2);
    ExpectReferenceRun(run_.nodes, *ref_, version + 2);
  }

  // Runs `step`, which finds server 1's copies lost: their servers are
  // probed off the step's path, and the catch-ups start once server 1
  // answers; returns once shard 0's seed reached the hold at `phase`.
  void StartCatchUp(uint64_t step, const std::string& phase = "blocks") {
    const std::string marker = hold_ + "/" + phase + "-shard0";
    std::remove(marker.c_str());  // of a catch-up before
    ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, step, step + 1));
    ASSERT_TRUE(AwaitFile(marker)) << "shard 0's seed never reached the hold";
  }

  ServerProcess& server(int i) { return cluster_->server(i); }
  bool SeedHeld() const {
    return access((hold_ + "/blocks-shard0").c_str(), F_OK) == 0 &&
           access((hold_ + "/release").c_str(), F_OK) != 0;
  }

  std::string hold_;
  std::unique_ptr<ServerCluster> cluster_;
  std::vector<std::string> addr_;
  v1::JobSpec spec_;
  ReplicatedRun run_;
  std::unique_ptr<ReferenceModel> ref_;
  double blocks0_ = 0;
};

// Steps acknowledged while the seed is held: each kept in the backlog,
// the copy still lost; once let go, the copy catches up through the
// backlog and rejoins.
TEST_F(CatchupBacklogTest, StepsGoOnWhileTheSeedIsHeldAndTheCopyCatchesUpThroughTheBacklog) {
  ASSERT_NO_FATAL_FAILURE(StartAndLoseServer1("slowseed"));
  constexpr uint64_t kHeldSteps = 4;
  const uint64_t first = kRestartStep + 1;  // the first step of the backlog
  ASSERT_NO_FATAL_FAILURE(StartCatchUp(kRestartStep));
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, first, first + 1));
  const double one_step = ServerMetric(server(0), kBacklog);
  EXPECT_GE(one_step, static_cast<double>(ShardSumBytes(spec_, 3, 0)));
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, first + 1, first + kHeldSteps));
  // Acknowledged while the copy holds none of them.
  ASSERT_TRUE(SeedHeld());
  EXPECT_EQ(ServerMetric(server(0), kBacklog), kHeldSteps * one_step);
  EXPECT_EQ(ServerMetric(server(0), kUnder), blocks0_);
  EXPECT_EQ(ServerMetric(server(0), kCatchupBytes), 0);
  const uint64_t next = ReleaseAndRejoin(first + kHeldSteps);
  EXPECT_EQ(next, first + kHeldSteps + 1) << "the copies rejoined a step late";
  ExpectCaughtUp(next);
}

// A backlog bound of two and a half steps: the third step held drops the
// catch-up (its backlog freed, the copy still lost), the next step starts
// another, which completes once the seed is let go.
TEST_F(CatchupBacklogTest, ABacklogPastItsBoundDropsTheCatchupAndALaterStepStartsAnother) {
  v1::JobSpec spec = ReplicatedSpec("bounded", 1);
  const uint64_t step_bytes = ShardSumBytes(spec, 3, 0);
  const uint64_t bound = step_bytes * 5 / 2;
  ASSERT_NO_FATAL_FAILURE(
      StartAndLoseServer1("bounded", {absl::StrCat("--catchup_backlog_bytes=", bound)}));
  ASSERT_NO_FATAL_FAILURE(StartCatchUp(kRestartStep));
  uint64_t step = kRestartStep + 1;
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, step, step + 2));
  step += 2;
  ASSERT_TRUE(SeedHeld());
  const double two_steps = ServerMetric(server(0), kBacklog);
  EXPECT_GE(two_steps, 2.0 * static_cast<double>(step_bytes));
  EXPECT_LE(two_steps, static_cast<double>(bound));
  // The third would pass the bound: dropped, the copy still lost.
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, step, step + 1));
  ++step;
  EXPECT_EQ(ServerMetric(server(0), kBacklog), 0);
  EXPECT_EQ(ServerMetric(server(0), kUnder), blocks0_);
  // The next step starts another, held again at the seed, with the step
  // after it in its backlog.
  ASSERT_NO_FATAL_FAILURE(StartCatchUp(step));
  ++step;
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, step, step + 1));
  ++step;
  ASSERT_TRUE(SeedHeld());
  EXPECT_EQ(ServerMetric(server(0), kBacklog), two_steps / 2);
  EXPECT_EQ(ServerMetric(server(0), kCatchupBytes), 0);
  ExpectCaughtUp(ReleaseAndRejoin(step));
}

// Fencing keeps its meaning in the background: the copy being caught up
// claims shard 0 (StaticMembership: asked for it) while its seed is held
// once it holds the state; let go, its catch-up's next step is refused
// ABORTED (it serves the shard as primary now), and server 0's next step
// is not acknowledged: it answers that it is not the primary, naming
// server 1, and answers for shard 0 no more. (The copy held no step
// acknowledged since: the clients would refuse it, beyond k.)
TEST_F(CatchupBacklogTest, ACopyThatServesTheShardNowFencesThePrimaryAtItsNextStep) {
  ASSERT_NO_FATAL_FAILURE(StartAndLoseServer1("fencedcatchup", {}, "applied"));
  const std::string job = spec_.job_id();
  ASSERT_NO_FATAL_FAILURE(StartCatchUp(kRestartStep, "applied"));
  // A step in the catch-up's backlog, acknowledged without the copy.
  ASSERT_NO_FATAL_FAILURE(TrainSteps(run_.nodes, *ref_, kRestartStep + 1, kRestartStep + 2));
  grpc::Status claimed = DirectJobStatus(addr_[1], job, 0);
  ASSERT_TRUE(claimed.ok()) << claimed.error_message();
  Touch(hold_ + "/release");
  // The backlog's step refused: the catch-up dropped, its backlog freed.
  double left = 0;
  EXPECT_TRUE(AwaitMetric(server(0), kBacklog, 0, &left)) << left << " bytes still held";
  const uint64_t step = kRestartStep + 2;
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    EXPECT_TRUE(PushNodeGradient(*run_.nodes[n], n, step).ok()) << "node " << n;
  }
  grpc::Status refused = DirectStep(addr_[0], job, 0, step, StepLr(step));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  for (const std::string& part :
       {absl::StrCat("not primary: shard 0 of job '", job, "' has a newer primary: step ", step,
                     " from this server was refused by ", addr_[1]),
        absl::StrCat("step ", step, " is not acknowledged")}) {
    EXPECT_NE(refused.error_message().find(part), std::string::npos)
        << "no '" << part << "' in: " << refused.error_message();
  }
  grpc::Status fenced = DirectJobStatus(addr_[0], job, 0);
  EXPECT_EQ(fenced.error_code(), grpc::StatusCode::UNAVAILABLE) << fenced.error_message();
  EXPECT_NE(fenced.error_message().find(addr_[1]), std::string::npos) << fenced.error_message();
}

// --catchup_backlog_bytes 0 or not a number: the server does not start and
// says which flag.
TEST(CatchupBacklogFlagTest, BadValuesAreRefusedNamingTheFlag) {
  for (const std::string value : {"0", "-1", "lots"}) {
    const std::string log = ::testing::TempDir() + "catchup-backlog-" + value + ".log";
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--catchup_backlog_bytes=" + value);
    o.stderr_path = log;
    EXPECT_FALSE(ServerProcess::Start(o).ok()) << value << " was accepted";
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("catchup_backlog_bytes"), std::string::npos) << value << ": " << text;
    std::remove(log.c_str());
  }
}

}  // namespace
}  // namespace zerostate::testing
