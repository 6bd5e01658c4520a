// A kill in the middle of re-replication: three servers in a
// real etcd, a job of two nodes with one backup per shard. Server 1 is
// SIGKILLed and restarted empty; at the next step its shards' primaries
// mark its copies lost, at the one after they start to catch them up in
// the background (ReplicaService.Seed, then the steps decided meanwhile).
// The servers run with --test_seed_hold, so that catch-up stops in the
// middle until the test lets it go, and the test kills a server: the
// catching-up one while it is held, or the seeding primary once its copy
// holds every step it acknowledged. Either way the run ends at the
// version of a run without faults, with its weights bit for bit: no step
// lost, none applied twice, no rollback (no checkpoint is ever taken or
// restored).
#include <iostream>

#include "tests/replication/etcd_cluster_fixture.h"

namespace zerostate::server {
namespace {

constexpr uint64_t kSteps = 8;
constexpr uint64_t kLostStep = 2;     // server 1 killed and restarted before it
constexpr uint64_t kCatchupStep = 3;  // its copies' catch-ups start in it
constexpr uint64_t kRestartStep = 5;  // the killed server back before it
constexpr uint64_t kTakeOverStep = 6;
constexpr uint64_t kMaxStepsToHold = 8;  // steps until a catch-up reaches its hold

class EtcdCatchupFaultTest : public EtcdClusterFixture {
 protected:
  EtcdCatchupFaultTest() : EtcdClusterFixture("catchupfault") {}

  // Starts the servers with catch-ups held at `phase`, and the job;
  // `tune` as StartNodes'.
  void Start(const std::string& phase,
             const std::function<void(client::ClientOptions&)>& tune = nullptr) {
    hold_ = TestDirectory("seedhold");
    StartServers({absl::StrCat("--test_seed_hold=", phase, ":", hold_)});
    if (HasFatalFailure()) return;
    spec_ = testing::ReplicatedSpec("catchupfault", 1);
    auto run = testing::StartNodes(spec_, addresses(), nullptr, tune);
    ASSERT_TRUE(run.ok()) << run.status();
    run_ = *std::move(run);
    ref_ = std::make_unique<testing::ReferenceModel>(run_.nodes[0]->spec());
  }

  // Steps up to kLostStep, then server 1 killed and restarted empty: shard
  // 1 moves to server 2 (the restart revoked server 1's lease), and the
  // copies on server 1 of shards 0 and 1 are lost at kLostStep.
  void LoseServer1() {
    ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, 0, kLostStep));
    ASSERT_TRUE(server(1).Kill().ok());
    ASSERT_TRUE(server(1).Restart().ok());
    ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, kLostStep, kCatchupStep));
    EXPECT_EQ(PrimaryOf(spec_.job_id(), 1), addresses()[2]);
  }

  // Step kCatchupStep, with `fault` run on a thread of its own once server
  // 1 holds shard 0's catch-up at the phase; then the hold is let go.
  void CatchupStepWith(const std::function<void()>& fault) {
    std::thread watcher([&] {
      EXPECT_TRUE(AwaitFile(hold_ + "/" + phase_marker_ + "-shard0"))
          << "shard 0's catch-up never reached the hold";
      fault();
      Touch(hold_ + "/release");
    });
    Train(run_, *ref_, kCatchupStep, kCatchupStep + 1);  // the caller checks for failures
    watcher.join();
  }

  // Steps from *step on (each a chance for the primaries to probe server 1
  // and start its catch-ups, off the steps' path) until shard 0's catch-up
  // reached its hold, at most kMaxStepsToHold of them; *step is then the
  // next step.
  void StepUntilHeld(uint64_t* step) {
    const uint64_t first = *step;
    do {
      ASSERT_LT(*step, first + kMaxStepsToHold) << "shard 0's catch-up never reached the hold";
      ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, *step, *step + 1));
      ++*step;
    } while (!AwaitFile(hold_ + "/" + phase_marker_ + "-shard0", absl::Seconds(1)));
  }

  std::string hold_;
  std::string phase_marker_;
  v1::JobSpec spec_;
  testing::ReplicatedRun run_;
  std::unique_ptr<testing::ReferenceModel> ref_;
};

// The catching-up server SIGKILLed when its copy of shard 0 has its first
// block: the primaries' catch-ups fail, the steps are acknowledged without
// it, and the copies stay lost. Restarted again, it is caught up in the
// next steps, bit-identical to the primaries; then shard 0's primary is
// SIGKILLed and shard 0 moves to that copy with no rollback.
TEST_F(EtcdCatchupFaultTest, TheCatchingUpServerKilledMidSeedIsCaughtUpOnceBack) {
  phase_marker_ = "blocks";
  Start(phase_marker_);
  if (HasFatalFailure() || IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(LoseServer1());
  ASSERT_NO_FATAL_FAILURE(CatchupStepWith([&] { EXPECT_TRUE(server(1).Kill().ok()); }));
  EXPECT_FALSE(server(1).running());
  ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, kCatchupStep + 1, kRestartStep));
  ASSERT_TRUE(server(1).Restart().ok());  // catch-ups pass the hold now
  ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, kRestartStep, kTakeOverStep));
  uint64_t step = kTakeOverStep;
  ASSERT_NO_FATAL_FAILURE(
      testing::TrainUntilReplicated(run_.nodes, *ref_, &step, {&server(0), &server(2)}));
  testing::ExpectSameCopies(addresses()[0], addresses()[1], spec_.job_id(), 0, step);
  testing::ExpectSameCopies(addresses()[2], addresses()[1], spec_.job_id(), 1, step);
  ASSERT_TRUE(server(0).Kill().ok());
  const uint64_t end = step + (kSteps - kTakeOverStep);
  ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, step, end));
  EXPECT_EQ(PrimaryOf(spec_.job_id(), 0), addresses()[1]);
  testing::ExpectReferenceRun(run_.nodes, *ref_, end);
}

// The seeding primary of shard 0 (server 0) SIGKILLed once its copy on
// server 1 holds every step it acknowledged: two steps are acknowledged
// while that copy's seed is held (it holds the state, not yet the steps),
// then the hold is let go and the catch-up's backlog crosses; server 0 is
// SIGKILLed in the next step, after node 0's push, before it decides it.
// The clients move shard 0 to server 1's copy when server 0's lease
// expires, push the step again and step there, once. Server 0 restarted is
// caught up by the primaries of its copies; the run ends bit-identical.
//
// A catch-up starts off the steps' path: a Step that finds the copy lost
// has its server probed, and a probe that finds it not answering yet
// (a loaded host) waits for a later Step. So the test steps until the
// catch-up reached its hold, and, once server 0 is back, until its copies
// are live again, instead of counting on a fixed number of steps.
TEST_F(EtcdCatchupFaultTest, TheSeedingPrimaryKilledOnceItsCopyHoldsItsStepsFailsOverToIt) {
  constexpr uint64_t kHeldSteps = 2;
  phase_marker_ = "applied";
  Start(phase_marker_);
  if (HasFatalFailure() || IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(LoseServer1());
  uint64_t step = kCatchupStep;
  ASSERT_NO_FATAL_FAILURE(StepUntilHeld(&step));
  // Acknowledged while the copy's seed is held: they cross in its backlog.
  ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, step, step + kHeldSteps));
  const uint64_t kill_step = step + kHeldSteps;
  EXPECT_NE(access((hold_ + "/release").c_str(), F_OK), 0);
  Touch(hold_ + "/release");
  // Server 1's copy reaches the acknowledged version through the backlog.
  testing::ExpectSameCopies(addresses()[0], addresses()[1], spec_.job_id(), 0, kill_step);
  ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, kill_step, kill_step + 1,
                                [&] { EXPECT_TRUE(server(0).Kill().ok()); }));
  EXPECT_FALSE(server(0).running());
  EXPECT_EQ(PrimaryOf(spec_.job_id(), 0), addresses()[1]);
  ASSERT_TRUE(server(0).Restart().ok());
  // Its copies caught up in the background, then live again.
  step = kill_step + 1;
  ASSERT_NO_FATAL_FAILURE(
      testing::TrainUntilReplicated(run_.nodes, *ref_, &step, {&server(1), &server(2)}));
  testing::ExpectSameCopies(addresses()[1], addresses()[0], spec_.job_id(), 0, step);
  testing::ExpectSameCopies(addresses()[2], addresses()[0], spec_.job_id(), 2, step);
  testing::ExpectSameCopies(addresses()[2], addresses()[1], spec_.job_id(), 1, step);
  ASSERT_NO_FATAL_FAILURE(Train(run_, *ref_, step, step + 1));
  testing::ExpectReferenceRun(run_.nodes, *ref_, step + 1);
}

// The seeding primary of shard 0 (server 0) SIGKILLed while its copy on
// server 1 holds only its first block (the seed never completes): shard 0
// has no copy that holds its acknowledged steps. Server 1's copy, whose
// job the seed registered there, serves nothing as primary until its seed
// commits (Reseed::DeposeRegistered), so it does not take the shard over,
// and the step ends with the documented error in bounded time (the
// client's unavailable_wait, 5 s here, after the kill's lease expired),
// naming the shard and each copy's answer, instead of training on a copy
// that holds no acknowledged step.
TEST_F(EtcdCatchupFaultTest, TheSeedingPrimaryKilledBeforeItsCopyHoldsTheShardEndsTheStepNamingIt) {
  phase_marker_ = "blocks";
  Start(phase_marker_,
        [](client::ClientOptions& o) { o.unavailable_wait = std::chrono::seconds(5); });
  if (HasFatalFailure() || IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(LoseServer1());
  // Killed between two steps once the seed is held: a kill during a step
  // could find a node in a Gather of a version that never comes, which
  // waits out its RPC deadline (60 s) before the step ends.
  uint64_t step = kCatchupStep;
  ASSERT_NO_FATAL_FAILURE(StepUntilHeld(&step));
  ASSERT_TRUE(server(0).Kill().ok());
  const absl::Time killed = absl::Now();
  std::vector<std::vector<float>> grads(run_.nodes.size());
  const absl::Status s = testing::TrainerStep(run_.nodes, step, grads, nullptr);
  const absl::Duration after = absl::Now() - killed;
  std::cout << "seeding primary killed mid-seed: step " << step << " failed " << after
            << " after the kill: " << s << std::endl;
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("shard 0 of job catchupfault"), std::string::npos) << s;
  EXPECT_NE(s.message().find("none of its copies answered for it"), std::string::npos) << s;
  // Server 1's copy refused it: its seed never completed.
  EXPECT_NE(s.message().find(absl::StrCat(addresses()[1], ": not primary: shard 0 of job "
                                          "'catchupfault': this server restarted and its copy "
                                          "has not been caught up yet")),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace zerostate::server
