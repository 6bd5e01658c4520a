// FaultProxy over real loopback sockets, in front of a real echo server.
#include "tests/testing/fault_proxy.h"

#include "absl/time/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerostate::testing {
namespace {

// Echoes every byte back on every connection, one thread per connection.
class EchoServer {
 public:
  EchoServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    acceptor_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        echoers_.emplace_back([c] {
          char buf[4096];
          ssize_t n;
          while ((n = recv(c, buf, sizeof(buf), 0)) > 0) send(c, buf, n, MSG_NOSIGNAL);
          close(c);
        });
      }
    });
  }
  ~EchoServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : echoers_) t.join();  // each ends when the proxy closes its side
    close(fd_);
  }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> echoers_;
};

int Dial(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << errno;
  return fd;
}

// Reads until `want` bytes, EOF or an error; returns what came and sets
// `end` to 0 (all came), the recv result that ended it, or -errno.
std::string ReadUpTo(int fd, size_t want, int* end) {
  std::string got;
  *end = 0;
  char buf[4096];
  while (got.size() < want) {
    ssize_t n = recv(fd, buf, std::min(sizeof(buf), want - got.size()), 0);
    if (n <= 0) {
      *end = n == 0 ? 1 : -errno;  // 1: EOF
      return got;
    }
    got.append(buf, n);
  }
  return got;
}

bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

class FaultProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto proxy = FaultProxy::Start(echo_.address());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }
  // Sends `msg` through a new connection and reads the echo.
  void ExpectEcho(const std::string& msg) {
    int fd = Dial(proxy_->address());
    ASSERT_EQ(send(fd, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
    int end = 0;
    EXPECT_EQ(ReadUpTo(fd, msg.size(), &end), msg);
    close(fd);
  }

  EchoServer echo_;
  std::unique_ptr<FaultProxy> proxy_;
};

TEST_F(FaultProxyTest, ForwardsBothWays) {
  ExpectEcho(std::string(300000, 'x'));  // more than one read and one queue slot
  EXPECT_EQ(proxy_->accepted(), 1);
  // The proxy counts bytes after it wrote them, so the echo can reach us
  // before the count of its last piece: wait for the counts to settle.
  for (int i = 0; i < 500 && proxy_->forwarded(FaultProxy::Direction::kToClient) < 300000u; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(proxy_->forwarded(FaultProxy::Direction::kToTarget), 300000u);
  EXPECT_EQ(proxy_->forwarded(FaultProxy::Direction::kToClient), 300000u);
}

TEST_F(FaultProxyTest, CutAllResetsOpenConnectionsAndLetsNewOnesThrough) {
  int fd = Dial(proxy_->address());
  ASSERT_EQ(send(fd, "ping", 4, 0), 4);
  int end = 0;
  ASSERT_EQ(ReadUpTo(fd, 4, &end), "ping");
  proxy_->CutAll(FaultProxy::CutMode::kReset);
  ReadUpTo(fd, 1, &end);
  EXPECT_EQ(end, -ECONNRESET);
  close(fd);
  EXPECT_EQ(proxy_->cuts(), 1);
  ExpectEcho("after the cut");
}

TEST_F(FaultProxyTest, CutAllCanCloseInOrder) {
  int fd = Dial(proxy_->address());
  ASSERT_EQ(send(fd, "ping", 4, 0), 4);
  int end = 0;
  ASSERT_EQ(ReadUpTo(fd, 4, &end), "ping");
  proxy_->CutAll(FaultProxy::CutMode::kClose);
  EXPECT_EQ(ReadUpTo(fd, 1, &end), "");
  EXPECT_EQ(end, 1) << "expected EOF";
  close(fd);
}

TEST_F(FaultProxyTest, CutAfterForwardsExactlyNBytesThenResets) {
  int fd = Dial(proxy_->address());
  proxy_->CutAfter(FaultProxy::Direction::kToTarget, 10);
  const std::string msg = "0123456789abcdefghij";
  ASSERT_EQ(send(fd, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  int end = 0;
  // The echo of the 10 bytes may or may not beat the reset back.
  const std::string echoed = ReadUpTo(fd, msg.size(), &end);
  EXPECT_EQ(echoed, msg.substr(0, echoed.size()));
  EXPECT_LE(echoed.size(), 10u);
  EXPECT_NE(end, 0) << "the connection was not cut";
  close(fd);
  EXPECT_EQ(proxy_->forwarded(FaultProxy::Direction::kToTarget), 10u);
  EXPECT_EQ(proxy_->cuts(), 1);
  ExpectEcho("disarmed after one cut");
}

TEST_F(FaultProxyTest, BlackHoleHoldsEverythingUntilReleased) {
  proxy_->SetBlackHole(true);
  int fd = Dial(proxy_->address());  // accepted, not forwarded
  ASSERT_EQ(send(fd, "held", 4, 0), 4);
  EXPECT_FALSE(Readable(fd, 200));
  EXPECT_EQ(proxy_->forwarded(FaultProxy::Direction::kToTarget), 0u);
  proxy_->SetBlackHole(false);
  int end = 0;
  EXPECT_EQ(ReadUpTo(fd, 4, &end), "held");
  close(fd);
}

TEST_F(FaultProxyTest, DelayHoldsBytesForTheDelay) {
  proxy_->SetDelay(absl::Milliseconds(400));
  int fd = Dial(proxy_->address());
  ASSERT_EQ(send(fd, "late", 4, 0), 4);
  // Held at least 400 ms one way (800 ms round trip): nothing in the first 300.
  EXPECT_FALSE(Readable(fd, 300));
  int end = 0;
  EXPECT_EQ(ReadUpTo(fd, 4, &end), "late");
  close(fd);
}

TEST_F(FaultProxyTest, TargetDownResetsTheClient) {
  auto proxy = FaultProxy::Start("127.0.0.1:1");  // nothing listens on port 1
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  int fd = Dial((*proxy)->address());
  int end = 0;
  ReadUpTo(fd, 1, &end);
  EXPECT_NE(end, 0);
  close(fd);
}

TEST_F(FaultProxyTest, ShutdownClosesOpenConnections) {
  int fd = Dial(proxy_->address());
  ASSERT_EQ(send(fd, "x", 1, 0), 1);
  int end = 0;
  ASSERT_EQ(ReadUpTo(fd, 1, &end), "x");
  proxy_.reset();  // joins every thread
  ReadUpTo(fd, 1, &end);
  EXPECT_NE(end, 0);
  close(fd);
}

TEST(FaultProxyStartTest, BadTargetIsNamed) {
  for (const char* bad : {"", "nohost", "example.com:80", "127.0.0.1:0", "127.0.0.1:x"}) {
    auto proxy = FaultProxy::Start(bad);
    ASSERT_FALSE(proxy.ok()) << bad;
    EXPECT_EQ(proxy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(proxy.status().message().find(absl::StrCat("'", bad, "'")), std::string::npos)
        << proxy.status();
  }
}

}  // namespace
}  // namespace zerostate::testing
