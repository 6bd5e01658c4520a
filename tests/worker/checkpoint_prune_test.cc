// --keep_checkpoints under real processes: 2 zerostate-server processes
// writing a checkpoint after every step, and zerostate-worker's rank 0
// deleting the older ones. A server killed mid-run makes rank 0 restore the
// newest checkpoint, which pruning must have left whole: the run ends with
// the weights of a run without the fault, bit for bit, and only the newest
// two checkpoints are left on disk.
#include <dirent.h>

#include <set>

#include "tests/worker/kill_fixture.h"

namespace zerostate::testing {
namespace {

class CheckpointPruneTest : public KillFixture {
 protected:
  // Past the kill after step 31, with steps after the rollback.
  CheckpointPruneTest() { steps_ = 40; }
};

// The entries of directory `dir`, without "." and "..".
std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  closedir(d);
  return names;
}

TEST_F(CheckpointPruneTest, KeepsTheNewestTwoAndRollsBackToTheNewestBitIdentical) {
  const std::string reference = RunClean("clean");
  ASSERT_FALSE(reference.empty());
  const std::string job = "pruned";
  auto nodes = StartNodes(job, {"--checkpoint_every=1", "--keep_checkpoints=2", CheckpointFlag()});
  CrashServerAfterStep(*nodes[0], 31);
  for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
  const std::string log = nodes[0]->Log();
  // Rank 0 pruned as it went and rolled back to a checkpoint it kept.
  EXPECT_NE(log.find(absl::StrCat("deleted old checkpoint ", dir_, "ckpt/", job, "/v0 ")),
            std::string::npos) << log;
  EXPECT_NE(log.find("restored"), std::string::npos) << log;
  EXPECT_EQ(log.find("pruning old checkpoints:"), std::string::npos) << log;
  const std::string crashed = Weights(job);
  EXPECT_EQ(crashed.size(), reference.size());
  EXPECT_TRUE(crashed == reference) << "the rolled-back run ended with other weights";
  // 40 steps: checkpoints v0 .. v40 were written; v39 and v40 remain, whole.
  const std::string job_dir = absl::StrCat(dir_, "ckpt/", job);
  EXPECT_EQ(Entries(job_dir), (std::set<std::string>{"v39", "v40"}));
  for (const char* v : {"/v39", "/v40"}) {
    EXPECT_EQ(Entries(job_dir + v),
              (std::set<std::string>{"shard-0-of-2.manifest.json", "shard-0-of-2.state",
                                     "shard-1-of-2.manifest.json", "shard-1-of-2.state"}))
        << v;
  }
}

}  // namespace
}  // namespace zerostate::testing
