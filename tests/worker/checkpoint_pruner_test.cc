// PruneCheckpoints on real directories laid out as the state servers write
// checkpoints (proto/zerostate/v1/checkpoint.proto): which it deletes, and
// everything it must leave alone.
#include "worker/checkpoint_pruner.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"

namespace zerostate::worker {
namespace {

class CheckpointPrunerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = absl::StrCat(::testing::TempDir(), "pruner_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    root_ = base_ + "/root";
    ASSERT_EQ(std::system(absl::StrCat("rm -rf ", base_, " && mkdir -p ", root_, "/job").c_str()), 0);
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  // Shard `shard` of 2 of a checkpoint of `job` at `version` in `dir`.
  static void WriteShard(const std::string& dir, const std::string& job, uint64_t version,
                         int shard) {
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
    Write(absl::StrCat(dir, "/shard-", shard, "-of-2.state"), "data");
    Write(absl::StrCat(dir, "/shard-", shard, "-of-2.manifest.json"),
          absl::StrCat(R"({"formatVersion":1,"spec":{"jobId":")", job, R"("},"version":")",
                       version, R"(","numShards":2,"shardIndex":)", shard, "}"));
  }
  void WriteCheckpoint(uint64_t version) {
    for (int shard : {0, 1}) WriteShard(Dir(version), "job", version, shard);
  }
  std::string Dir(uint64_t version) const { return absl::StrCat(root_, "/job/v", version); }

  static std::set<std::string> Entries(const std::string& dir) {
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
  // The problems, one per line, for failure messages.
  static std::string Joined(const PruneReport& r) {
    std::string out;
    for (const auto& p : r.problems) absl::StrAppend(&out, p, "\n");
    return out;
  }

  std::string base_;
  std::string root_;
};

TEST_F(CheckpointPrunerTest, KeepsTheNewestAndDeletesTheOlderOnes) {
  for (uint64_t v = 1; v <= 5; ++v) WriteCheckpoint(v);
  PruneReport r = PruneCheckpoints(root_, "job", 5, 2);
  EXPECT_TRUE(r.problems.empty()) << Joined(r);
  EXPECT_EQ(r.deleted, (std::vector<std::string>{Dir(3), Dir(2), Dir(1)}));
  EXPECT_EQ(Entries(root_ + "/job"), (std::set<std::string>{"v4", "v5"}));
  EXPECT_EQ(Entries(Dir(4)).size(), 4u);
}

TEST_F(CheckpointPrunerTest, KeepZeroDeletesNothing) {
  for (uint64_t v = 1; v <= 3; ++v) WriteCheckpoint(v);
  PruneReport r = PruneCheckpoints(root_, "job", 3, 0);
  EXPECT_TRUE(r.deleted.empty());
  EXPECT_TRUE(r.problems.empty()) << Joined(r);
  EXPECT_EQ(Entries(root_ + "/job"), (std::set<std::string>{"v1", "v2", "v3"}));
}

TEST_F(CheckpointPrunerTest, KeepOneLeavesOnlyTheNewest) {
  for (uint64_t v = 0; v <= 2; ++v) WriteCheckpoint(v);
  PruneReport r = PruneCheckpoints(root_, "job", 2, 1);
  EXPECT_TRUE(r.problems.empty()) << Joined(r);
  EXPECT_EQ(Entries(root_ + "/job"), (std::set<std::string>{"v2"}));
}

// An incomplete checkpoint (a failed write) does not count as one kept and
// goes; newer versions (another timeline of the job) stay.
TEST_F(CheckpointPrunerTest, DeletesIncompleteOnesAndLeavesNewerOnes) {
  WriteCheckpoint(1);
  WriteCheckpoint(2);
  WriteShard(Dir(3), "job", 3, 0);  // shard 1 never finished
  Write(Dir(3) + "/shard-1-of-2.state.tmp", "partial");
  WriteCheckpoint(4);
  WriteCheckpoint(9);
  PruneReport r = PruneCheckpoints(root_, "job", 4, 2);
  EXPECT_TRUE(r.problems.empty()) << Joined(r);
  EXPECT_EQ(r.deleted, (std::vector<std::string>{Dir(3), Dir(1)}));
  EXPECT_EQ(Entries(root_ + "/job"), (std::set<std::string>{"v2", "v4", "v9"}));
}

// Nothing that is not provably a checkpoint of this job is deleted, and
// nothing outside the root is reached; each refusal names the path.
TEST_F(CheckpointPrunerTest, LeavesAloneWhatIsNotThisJobsCheckpoint) {
  const std::string outside = base_ + "/outside";
  WriteShard(outside, "job", 1, 0);
  WriteShard(outside, "job", 1, 1);
  ASSERT_EQ(symlink(outside.c_str(), Dir(1).c_str()), 0);  // v1 -> outside the root
  WriteCheckpoint(2);
  Write(Dir(2) + "/notes.txt", "mine");  // a file the servers never write
  for (int shard : {0, 1}) WriteShard(Dir(3), "other", 3, shard);  // another job's
  for (int shard : {0, 1}) WriteShard(Dir(4), "job", 7, shard);    // another version's
  ASSERT_EQ(mkdir(Dir(5).c_str(), 0755), 0);  // no manifest at all
  Write(Dir(5) + "/shard-0-of-2.state", "data");
  Write(Dir(6), "a file, not a directory");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", root_, "/job/old ", root_, "/job/v06").c_str()), 0);
  WriteCheckpoint(8);

  PruneReport r = PruneCheckpoints(root_, "job", 8, 1);
  EXPECT_TRUE(r.deleted.empty());
  EXPECT_EQ(Entries(root_ + "/job"),
            (std::set<std::string>{"v1", "v2", "v3", "v4", "v5", "v6", "old", "v06", "v8"}));
  EXPECT_EQ(Entries(outside).size(), 4u);
  EXPECT_EQ(Entries(Dir(2)).size(), 5u);
  const std::string problems = Joined(r);
  EXPECT_NE(problems.find(Dir(1) + ": "), std::string::npos) << problems;
  EXPECT_NE(problems.find(Dir(2) + ": holds 'notes.txt'"), std::string::npos) << problems;
  // Either shard's manifest may be read first.
  EXPECT_NE(problems.find(Dir(3) + ": shard-"), std::string::npos) << problems;
  EXPECT_NE(problems.find("is the manifest of job 'other' version 3"), std::string::npos) << problems;
  EXPECT_NE(problems.find(Dir(4) + ": shard-"), std::string::npos) << problems;
  EXPECT_NE(problems.find("is the manifest of job 'job' version 7"), std::string::npos) << problems;
  EXPECT_NE(problems.find(Dir(6) + ": "), std::string::npos) << problems;
  EXPECT_NE(problems.find(Dir(5) + ": holds no manifest"), std::string::npos) << problems;
}

TEST_F(CheckpointPrunerTest, AMissingJobDirectoryIsReportedNamingIt) {
  PruneReport r = PruneCheckpoints(root_, "absent", 3, 2);
  EXPECT_TRUE(r.deleted.empty());
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find(root_ + "/absent: opening: No such file"), std::string::npos)
      << r.problems[0];
}

TEST_F(CheckpointPrunerTest, AJobIdThatLeavesTheRootIsRefused) {
  WriteCheckpoint(1);
  WriteCheckpoint(2);
  PruneReport r = PruneCheckpoints(root_ + "/job/v2", "..", 3, 1);
  EXPECT_TRUE(r.deleted.empty());
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("job id '..' is not one path component"), std::string::npos)
      << r.problems[0];
  EXPECT_EQ(Entries(root_ + "/job"), (std::set<std::string>{"v1", "v2"}));
}

}  // namespace
}  // namespace zerostate::worker
