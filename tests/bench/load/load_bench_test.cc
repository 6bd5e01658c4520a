// load_bench's helpers: the report lines its clients print, the child
// processes it drives, and the memory figures it reads from /proc.
#include <unistd.h>

#include <deque>
#include <string>

#include "absl/time/clock.h"
#include "bench/load/child_process.h"
#include "bench/load/proc_status.h"
#include "bench/load/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zerostate::bench {
namespace {

using ::testing::HasSubstr;

// Parses `lines` as a client's stdout; OUT_OF_RANGE when they run out.
absl::StatusOr<ClientReport> ParseLines(std::deque<std::string> lines) {
  return ClientReport::Parse([&]() -> absl::StatusOr<std::string> {
    if (lines.empty()) return absl::OutOfRangeError("no more lines");
    std::string line = lines.front();
    lines.pop_front();
    return line;
  });
}

TEST(ClientReportTest, FormatThenParseGivesTheSameReport) {
  ClientReport r;
  r.push_us = {5, 7, 1000000};
  r.step_us = {3};
  r.gather_us = {11, 0, 13};
  r.pushed_bytes = 1 << 20;
  r.gathered_bytes = 3;
  std::deque<std::string> lines;
  std::string text = r.Format();
  for (size_t nl; (nl = text.find('\n')) != std::string::npos; text.erase(0, nl + 1)) {
    lines.push_back(text.substr(0, nl));
  }
  absl::StatusOr<ClientReport> back = ParseLines(lines);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->push_us, r.push_us);
  EXPECT_EQ(back->step_us, r.step_us);
  EXPECT_EQ(back->gather_us, r.gather_us);
  EXPECT_EQ(back->pushed_bytes, r.pushed_bytes);
  EXPECT_EQ(back->gathered_bytes, r.gathered_bytes);
}

TEST(ClientReportTest, EmptyStepLineIsNoStepCalls) {
  absl::StatusOr<ClientReport> r = ParseLines({"push 1", "step", "gather 2", "bytes 4 5", "done"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->step_us.empty());
}

TEST(ClientReportTest, BadLinesAreNamed) {
  struct Case {
    std::string line, names;
  } cases[] = {
      {"push 1 x", "'x' is not a count"},
      {"gather -3", "'-3' is not a count"},
      {"pusj 1", "not one of push, step, gather, bytes, done"},
      {"bytes 1", "not one of push, step, gather, bytes, done"},
      {"error: connection refused", "'error: connection refused'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ClientReport> r = ParseLines({c.line, "done"});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_THAT(r.status().message(), HasSubstr(c.names)) << c.line;
  }
}

TEST(ClientReportTest, ReportCutShortPassesTheReadError) {
  absl::StatusOr<ClientReport> r = ParseLines({"push 1", "step"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
}

TEST(QuantileTest, NearestRank) {
  std::vector<int64_t> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(Quantile(v, 0.5), 50);
  EXPECT_EQ(Quantile(v, 0.99), 99);
  EXPECT_EQ(Quantile(v, 1.0), 100);
  EXPECT_EQ(Quantile({7}, 0.99), 7);
  EXPECT_EQ(Quantile({}, 0.5), 0);
}

TEST(ProcStatusTest, ReadsThisProcess) {
  absl::StatusOr<uint64_t> rss = ProcStatusBytes(getpid(), "VmRSS");
  ASSERT_TRUE(rss.ok()) << rss.status();
  absl::StatusOr<uint64_t> hwm = ProcStatusBytes(getpid(), "VmHWM");
  ASSERT_TRUE(hwm.ok()) << hwm.status();
  EXPECT_GT(*rss, 0u);
  EXPECT_GE(*hwm, *rss);
}

TEST(ProcStatusTest, UnknownFieldAndProcessAreNotFound) {
  absl::StatusOr<uint64_t> field = ProcStatusBytes(getpid(), "VmNoSuch");
  EXPECT_EQ(field.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(field.status().message(), HasSubstr("no VmNoSuch line"));
  absl::StatusOr<uint64_t> pid = ProcStatusBytes(0x3fffffff, "VmRSS");
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound);
}

TEST(ProcStatusTest, FieldThatIsNotBytesIsNamed) {
  absl::StatusOr<uint64_t> threads = ProcStatusBytes(getpid(), "Threads");
  EXPECT_EQ(threads.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(threads.status().message(), HasSubstr("Threads is"));
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

TEST(ChildProcessTest, LinesBothWaysAndExitStatus) {
  auto c = ChildProcess::Spawn({"/bin/sh", "-c", "read x; echo \"got $x\"; echo two; exit 3"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->WriteLine("hello").ok());
  EXPECT_EQ((*c)->ReadLine(Soon()).value_or("?"), "got hello");
  EXPECT_EQ((*c)->ReadLine(Soon()).value_or("?"), "two");
  EXPECT_EQ((*c)->ReadLine(Soon()).status().code(), absl::StatusCode::kOutOfRange);
  absl::Status s = (*c)->Wait(Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("exit status 3"));
}

TEST(ChildProcessTest, CleanExitIsOk) {
  auto c = ChildProcess::Spawn({"/bin/true"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Wait(Soon()).ok());
}

TEST(ChildProcessTest, MissingBinaryExits127) {
  auto c = ChildProcess::Spawn({"/nonexistent/load_client"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status s = (*c)->Wait(Soon());
  EXPECT_THAT(s.message(), HasSubstr("exit status 127"));
}

TEST(ChildProcessTest, SilentChildMissesTheDeadline) {
  auto c = ChildProcess::Spawn({"/bin/sleep", "30"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::string> line = (*c)->ReadLine(absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::Status s = (*c)->Wait(absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ChildProcessTest, EmptyArgvIsRefused) {
  EXPECT_EQ(ChildProcess::Spawn({}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zerostate::bench
