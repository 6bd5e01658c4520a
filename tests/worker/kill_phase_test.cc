// A state server killed with SIGKILL in each phase of a step, and back on
// its port after 0, 3 or 30 s, under real zerostate-worker processes (2
// nodes of 2 local ranks as threads, 2 real servers, --checkpoint_every=5,
// 25 steps: the kill points, the rollback to step 10, and 10 steps after):
// the ranks wait for the server (--server_wait_seconds), agree on the
// rollback, and the run ends with the weights of a run without the fault,
// bit for bit. --test_pause stops rank 0 just before the phase, so the kill
// lands there every time: before its push of step 12 (the other node's
// pushes of it are in or on their way), before the coordinator's GradStats
// and Step, after the Step while the gathers of the new version wait, and before the
// checkpoint of version 15 (the other ranks are already in step 15).
#include <fstream>

#include "tests/worker/kill_fixture.h"

namespace zerostate::testing {
namespace {

struct PhaseCase {
  const char* phase;
  int step;
  int restart_after_s;
  int victim;  // server 0 also holds the rendezvous every rollback meets at
};

void PrintTo(const PhaseCase& c, std::ostream* os) {
  *os << c.phase << " of step " << c.step << ", server " << c.victim << " back after "
      << c.restart_after_s << " s";
}

std::string CaseName(const ::testing::TestParamInfo<PhaseCase>& info) {
  return absl::StrCat(info.param.phase, "_server", info.param.victim, "_back_after_",
                      info.param.restart_after_s, "s");
}

class KillPhaseTest : public KillFixture, public ::testing::WithParamInterface<PhaseCase> {};

TEST_P(KillPhaseTest, RunRidesOutTheServerAndEndsBitIdentical) {
  const PhaseCase c = GetParam();
  const std::string reference = RunClean("clean");
  ASSERT_FALSE(reference.empty());
  const std::string job = absl::StrCat("phase_", c.phase, c.restart_after_s);
  const std::string resume = absl::StrCat(dir_, job, ".resume");
  auto nodes = StartNodes(job, {"--checkpoint_every=5", CheckpointFlag(),
                                absl::StrCat("--test_pause=", c.phase, ":", c.step, ":", resume)});
  const std::string paused = absl::StrCat("paused before the ", c.phase, " of step ", c.step);
  ASSERT_TRUE(nodes[0]->AwaitLog(paused, kRunTimeout)) << nodes[0]->Log();
  ASSERT_TRUE(cluster_->server(c.victim).Kill().ok());
  std::ofstream(resume).put('\n');  // rank 0 goes on into the server's absence
  absl::SleepFor(absl::Seconds(c.restart_after_s));
  ASSERT_TRUE(cluster_->server(c.victim).Restart().ok());
  for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
  const std::string log = nodes[0]->Log();
  EXPECT_NE(log.find("restored"), std::string::npos) << "no rollback?\n" << log;
  const std::string weights = Weights(job);
  EXPECT_EQ(weights.size(), reference.size());
  EXPECT_TRUE(weights == reference) << "the rolled-back run ended with other weights";
}

// Every phase with an immediate restart and one after 3 s (server 0 or 1
// killed), and one server away for 30 s (the same code path waits longer).
INSTANTIATE_TEST_SUITE_P(
    Phases, KillPhaseTest,
    ::testing::Values(PhaseCase{"push", 12, 0, 1}, PhaseCase{"push", 12, 3, 0},
                      PhaseCase{"step", 12, 0, 1}, PhaseCase{"step", 12, 3, 1},
                      PhaseCase{"gather", 12, 0, 1}, PhaseCase{"gather", 12, 3, 0},
                      PhaseCase{"checkpoint", 15, 0, 1}, PhaseCase{"checkpoint", 15, 3, 0},
                      PhaseCase{"gather", 12, 30, 1}),
    CaseName);

}  // namespace
}  // namespace zerostate::testing
