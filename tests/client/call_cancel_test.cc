// CallCancel (client/call_cancel.h): an interrupt registered runs when the
// call is cancelled (a read blocked on a real socket then ends), at once
// when registered after; one reset before never runs; Check and Explain
// answer CANCELLED with the reason from then on, whatever the attempt saw.
#include "client/call_cancel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace zerostate::client {
namespace {

TEST(CallCancelTest, CancelShutsDownTheSocketOfTheAttemptInProgress) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  CallCancel cancel;
  EXPECT_TRUE(cancel.Check().ok());
  ssize_t got = 1;
  absl::Status seen;
  std::thread attempt([&] {
    CallCancel::Registration r = cancel.OnCancel([fd = fds[0]] { shutdown(fd, SHUT_RDWR); });
    char c;
    got = read(fds[0], &c, 1);  // a gather waiting for a version: the peer never writes
    r.Reset();
    seen = cancel.Explain(absl::UnavailableError("connection broke"));
  });
  cancel.Cancel("version 3 was dropped");
  attempt.join();
  EXPECT_EQ(got, 0);
  EXPECT_EQ(seen.code(), absl::StatusCode::kCancelled);  // not retried, unlike UNAVAILABLE
  EXPECT_EQ(seen.message(), "version 3 was dropped");
  cancel.Cancel("a second reason");  // the first counts
  EXPECT_EQ(cancel.Check().message(), "version 3 was dropped");
  close(fds[0]);
  close(fds[1]);
}

TEST(CallCancelTest, AnInterruptRegisteredAfterRunsAtOnceAndAResetOneNever) {
  CallCancel cancel;
  int ran = 0;
  CallCancel::Registration reset = cancel.OnCancel([&] { ++ran; });
  reset.Reset();  // the attempt ended: its socket may be closed and reused
  CallCancel::Registration moved = cancel.OnCancel([&] { ran += 10; });
  CallCancel::Registration kept = std::move(moved);
  EXPECT_TRUE(cancel.Explain(absl::OkStatus()).ok());
  EXPECT_EQ(cancel.Explain(absl::DeadlineExceededError("late")).code(),
            absl::StatusCode::kDeadlineExceeded);  // not cancelled: as the attempt saw it
  cancel.Cancel("");
  EXPECT_EQ(ran, 10);
  EXPECT_EQ(cancel.Check().message(), "cancelled");
  CallCancel::Registration late = cancel.OnCancel([&] { ran += 100; });
  EXPECT_EQ(ran, 110);  // an attempt starting after the cancel is interrupted at once
  EXPECT_TRUE(cancel.Explain(absl::OkStatus()).ok());  // a finished attempt stays OK
}

}  // namespace
}  // namespace zerostate::client
