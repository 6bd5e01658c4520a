#include "common/timeline.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace zerostate {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

int64_t Field(const std::string& line, const std::string& name) {
  const size_t at = line.find("\"" + name + "\":");
  EXPECT_NE(at, std::string::npos) << name << " in " << line;
  return std::stoll(line.substr(at + name.size() + 3));
}

class TimelineTest : public ::testing::Test {
 protected:
  void TearDown() override { Timeline::Stop(); }
  std::string path_ = ::testing::TempDir() + "/timeline_" + std::to_string(getpid()) + ".jsonl";
};

TEST_F(TimelineTest, OffRecordsNothingAndFlushWritesNothing) {
  EXPECT_FALSE(Timeline::on());
  Timeline::Record("fold_end", 1, 2);
  std::remove(path_.c_str());
  EXPECT_TRUE(Timeline::Flush().ok());
  EXPECT_FALSE(std::ifstream(path_).good());
}

TEST_F(TimelineTest, EventsAreWrittenInOrderWithTheirNumbersAndClock) {
  ASSERT_TRUE(Timeline::Start(path_).ok());
  EXPECT_TRUE(Timeline::on());
  Timeline::Record("step_begin", 7);
  Timeline::Record("fold_end", 3, 1);
  std::thread([] { Timeline::Record("speculate_end", 3); }).join();
  ASSERT_TRUE(Timeline::Flush().ok());
  const std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("\"what\":\"step_begin\""), std::string::npos) << lines[0];
  EXPECT_EQ(Field(lines[0], "a"), 7);
  EXPECT_EQ(Field(lines[0], "b"), -1);
  EXPECT_EQ(Field(lines[1], "a"), 3);
  EXPECT_EQ(Field(lines[1], "b"), 1);
  EXPECT_EQ(Field(lines[0], "pid"), getpid());
  EXPECT_LE(Field(lines[0], "t_ns"), Field(lines[1], "t_ns"));
  EXPECT_LE(Field(lines[1], "t_ns"), Field(lines[2], "t_ns"));
  EXPECT_NE(Field(lines[1], "tid"), Field(lines[2], "tid"));  // another thread
  // A later flush writes them all again, with what came since.
  Timeline::Record("step_end", 7);
  ASSERT_TRUE(Timeline::Flush().ok());
  EXPECT_EQ(Lines(path_).size(), 4u);
}

TEST_F(TimelineTest, AnEmptyPathIsRefusedAndAnUnwritableOneIsNamed) {
  EXPECT_EQ(Timeline::Start("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Timeline::on());
  ASSERT_TRUE(Timeline::Start("/nonexistent-dir/timeline.jsonl").ok());
  Timeline::Record("step_begin");
  absl::Status s = Timeline::Flush();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/timeline.jsonl"), std::string::npos) << s;
}

}  // namespace
}  // namespace zerostate
