#include "tests/testing/server_process.h"

#include <gtest/gtest.h>

#include <string>

namespace zerostate::testing {
namespace {

ServerProcessOptions FakeOptions(std::vector<std::string> args = {}) {
  ServerProcessOptions o;
  o.binary = FAKE_SERVER_PATH;
  o.args = std::move(args);
  o.start_timeout = absl::Seconds(2);
  o.stop_timeout = absl::Seconds(2);
  return o;
}

TEST(ServerProcessTest, StartsParsesPortAndStopsCleanly) {
  auto server = ServerProcess::Start(FakeOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1:" + std::to_string((*server)->port()));
  EXPECT_EQ((*server)->metrics_address(), "127.0.0.1:9");
  EXPECT_TRUE((*server)->running());
  EXPECT_TRUE((*server)->Stop().ok());
  EXPECT_FALSE((*server)->running());
  EXPECT_TRUE((*server)->Stop().ok());  // a no-op once stopped
}

TEST(ServerProcessTest, KillThenRestartKeepsThePort) {
  auto server = ServerProcess::Start(FakeOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  int port = (*server)->port();
  pid_t first = (*server)->pid();
  ASSERT_TRUE((*server)->Kill().ok());
  EXPECT_FALSE((*server)->running());
  ASSERT_TRUE((*server)->Restart().ok());
  EXPECT_EQ((*server)->port(), port);
  EXPECT_NE((*server)->pid(), first);
}

TEST(ServerProcessTest, RestartWhileRunningIsRefused) {
  auto server = ServerProcess::Start(FakeOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status s = (*server)->Restart();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("still running"), absl::string_view::npos) << s;
}

TEST(ServerProcessTest, EarlyExitNamesTheExitStatus) {
  auto server = ServerProcess::Start(FakeOptions({"--exit_code=7"}));
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(server.status().message().find("exit status 7"), absl::string_view::npos)
      << server.status();
}

TEST(ServerProcessTest, MissingListeningLineTimesOut) {
  auto server = ServerProcess::Start(FakeOptions({"--silent"}));
  ASSERT_EQ(server.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(server.status().message().find("listening on"), absl::string_view::npos)
      << server.status();
}

TEST(ServerProcessTest, StopKillsAServerThatIgnoresSigterm) {
  auto server = ServerProcess::Start(FakeOptions({"--ignore_term"}));
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status s = (*server)->Stop();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("SIGTERM"), absl::string_view::npos) << s;
  EXPECT_FALSE((*server)->running());
}

TEST(ServerProcessTest, EmptyBinaryIsInvalid) {
  auto server = ServerProcess::Start(ServerProcessOptions{});
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("binary"), absl::string_view::npos);
}

TEST(ServerProcessTest, MissingBinaryFailsToStart) {
  ServerProcessOptions o = FakeOptions();
  o.binary = "/nonexistent/zerostate-server";
  auto server = ServerProcess::Start(o);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(server.status().message().find("exit status 127"), absl::string_view::npos)
      << server.status();
}

TEST(ServerClusterTest, StartsNServersOnDistinctPorts) {
  auto cluster = ServerCluster::Start(3, FakeOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::string> addrs = (*cluster)->addresses();
  ASSERT_EQ(addrs.size(), 3u);
  EXPECT_NE(addrs[0], addrs[1]);
  EXPECT_NE(addrs[1], addrs[2]);
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

TEST(ServerClusterTest, ZeroServersIsInvalid) {
  auto cluster = ServerCluster::Start(0, FakeOptions());
  ASSERT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cluster.status().message().find("servers"), absl::string_view::npos);
}

TEST(ServerClusterTest, AFailingServerIsNamedByIndex) {
  auto cluster = ServerCluster::Start(2, FakeOptions({"--exit_code=2"}));
  ASSERT_EQ(cluster.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(cluster.status().message().find("server 0 of 2"), absl::string_view::npos)
      << cluster.status();
}

}  // namespace
}  // namespace zerostate::testing
