// ConnCutter (client/conn_cutter.h) on real sockets: a read blocked on a
// tracked socket ends when the cutter is cut; new connections are refused
// while cut, naming why; a socket tracked while cut is shut down at once;
// an untracked one is left alone.
#include "client/conn_cutter.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

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

}  // namespace
}  // namespace zerostate::client
