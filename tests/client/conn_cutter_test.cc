// ConnCutter (client/conn_cutter.h) on real sockets: a read blocked on a
// tracked socket ends when the cutter is cut; new connections are refused
// while cut, naming why; a socket tracked while cut is shut down at once;
// an untracked one is left alone. And what a cut means to the retries
// (client/retry.h): a server found silent is silent since keepalive_timeout
// before its cut, and gets no attempt past the unavailable window counted
// from then, not even a first one (the call fails naming the cut).
#include "client/conn_cutter.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/metrics.h"
#include "client/retry.h"
#include "client/server_conn.h"
#include "grpcpp/security/credentials.h"

namespace zerostate::client {
namespace {

struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

TEST(ConnCutterTest, ACutEndsABlockedReadAndRefusesNewConnectionsUntilRestored) {
  ConnCutter cutter;
  SocketPair pair;
  cutter.Track(pair.fds[0]);
  ssize_t got = 1;
  std::thread reader([&] {
    char c;
    got = read(pair.fds[0], &c, 1);  // the peer never writes
  });
  EXPECT_TRUE(cutter.Check().ok());
  cutter.Cut("server a:1 stopped answering");
  reader.join();
  EXPECT_EQ(got, 0);  // shut down: end of stream
  absl::Status refused = cutter.Check();
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_EQ(refused.message(), "server a:1 stopped answering");
  cutter.Untrack(pair.fds[0]);
  cutter.Restore();
  EXPECT_TRUE(cutter.Check().ok());
}

TEST(ConnCutterTest, ASocketTrackedWhileCutIsShutDownAndAnUntrackedOneIsLeftAlone) {
  ConnCutter cutter;
  SocketPair tracked, untracked;
  cutter.Track(untracked.fds[0]);
  cutter.Untrack(untracked.fds[0]);
  cutter.Cut("gone");
  cutter.Track(tracked.fds[0]);
  char c = 'x';
  EXPECT_EQ(read(tracked.fds[0], &c, 1), 0);
  ASSERT_EQ(write(untracked.fds[1], &c, 1), 1);
  EXPECT_EQ(read(untracked.fds[0], &c, 1), 1);
  cutter.Untrack(tracked.fds[0]);
}

TEST(ConnCutterTest, ASilentServerIsSilentFromKeepaliveTimeoutBeforeItsCut) {
  ClientOptions options;
  options.servers = {"127.0.0.1:1"};
  options.keepalive_timeout = std::chrono::milliseconds(2000);
  ServerConn server(options, 0, grpc::InsecureChannelCredentials());
  EXPECT_FALSE(server.SilentSince().has_value());
  const absl::Time before = absl::Now();
  server.cutter()->Cut("no keepalive answer");
  const absl::Time after = absl::Now();
  ASSERT_TRUE(server.SilentSince().has_value());
  EXPECT_GE(*server.SilentSince(), before - absl::Seconds(2));
  EXPECT_LE(*server.SilentSince(), after - absl::Seconds(2));
  const absl::Time since = *server.SilentSince();
  server.cutter()->Cut("again");  // a cut in force keeps its start
  EXPECT_EQ(*server.SilentSince(), since);
  server.cutter()->Restore();
  EXPECT_FALSE(server.SilentSince().has_value());
}

// Attempts `Retrier::Run` makes of an RPC that answers UNAVAILABLE, with
// the failover window `unavailable_wait` (none: the options' window).
int AttemptsAgainstUnavailable(const ServerConn& server, const ClientOptions& options,
                               std::optional<absl::Duration> unavailable_wait) {
  ClientMetrics metrics(nullptr, options.servers);
  absl::Notification shutdown;
  JobToken token("");
  Retrier retrier(options, &metrics, &shutdown, &token);
  int attempts = 0;
  absl::Status s = retrier.Run(Method::kPushGradients, server, [&](grpc::ClientContext&) {
    ++attempts;
    return absl::UnavailableError("dropped");
  }, unavailable_wait);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  if (attempts == 0) {
    EXPECT_NE(s.message().find("no keepalive answer"), std::string::npos) << s;
  }
  return attempts;
}

TEST(ConnCutterTest, ASilentServerGetsNoAttemptPastTheWindowCountedFromItsSilence) {
  ClientOptions options;
  options.servers = {"127.0.0.1:1"};
  options.keepalive_timeout = std::chrono::milliseconds(2000);
  options.initial_backoff = std::chrono::milliseconds(1);
  options.max_backoff = std::chrono::milliseconds(1);
  ServerConn server(options, 0, grpc::InsecureChannelCredentials());
  // Not cut: max_attempts, and UNAVAILABLE as long as the window lasts.
  EXPECT_EQ(AttemptsAgainstUnavailable(server, options, absl::ZeroDuration()),
            options.max_attempts);
  EXPECT_GT(AttemptsAgainstUnavailable(server, options, absl::Milliseconds(300)),
            options.max_attempts);
  // Cut: silent for 2 s already, past a 1 s window (a replicated job's
  // failover_wait, say): no attempt at all, the caller fails over at once.
  server.cutter()->Cut("no keepalive answer");
  EXPECT_EQ(AttemptsAgainstUnavailable(server, options, absl::Seconds(1)), 0);
  EXPECT_EQ(AttemptsAgainstUnavailable(server, options, absl::ZeroDuration()), 0);
  // A call without a failover window (a job without backups) keeps its
  // attempts: there is nowhere else to go, and a channel may only blink.
  EXPECT_EQ(AttemptsAgainstUnavailable(server, options, std::nullopt), options.max_attempts);
  // A window longer than the silence so far (a restart may take minutes)
  // is still waited out: attempts go on until it ends.
  const absl::Time start = absl::Now();
  EXPECT_GT(AttemptsAgainstUnavailable(server, options, absl::Milliseconds(2300)), 1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
}

}  // namespace
}  // namespace zerostate::client
