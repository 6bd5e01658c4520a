#include "tests/testing/fault_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerostate::testing {
namespace {

constexpr size_t kReadBytes = 64 << 10;
constexpr size_t kMaxQueued = 1 << 20;  // per direction: stop reading beyond this
constexpr int kTickMs = 5;              // how often a connection looks at orders

absl::Status Errno(const std::string& call) {
  return absl::InternalError(absl::StrCat("fault proxy: ", call, ": ", std::strerror(errno)));
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Closes `fd`; with `reset`, the peer sees a RST instead of a FIN.
void CloseSocket(int fd, bool reset) {
  if (fd < 0) return;
  if (reset) {
    linger l{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  close(fd);
}

sockaddr_in Loopback(const std::string& host, int port, bool* ok) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  *ok = inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &addr.sin_addr) == 1;
  return addr;
}

// Bytes read from one side, due to be written to the other at `ready`.
struct Piece {
  absl::Time ready;
  std::string data;
  size_t written = 0;
};

}  // namespace

struct FaultProxy::Conn {
  int fd[2] = {-1, -1};  // [0] the client's socket, [1] the target's
  uint64_t generation = 0;
};

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& target) {
  const size_t colon = target.rfind(':');
  int port = 0;
  bool host_ok = false;
  if (colon != std::string::npos && absl::SimpleAtoi(target.substr(colon + 1), &port) && port > 0 &&
      port < 65536) {
    Loopback(target.substr(0, colon), port, &host_ok);
  }
  if (!host_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault proxy: target '", target, "' is not numeric-IPv4-host:port"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool ok = false;
  sockaddr_in addr = Loopback("127.0.0.1", 0, &ok);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status s = Errno("bind/listen");
    close(fd);
    return s;
  }
  std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  std::unique_ptr<FaultProxy> proxy(
      new FaultProxy(fd, std::move(address), target.substr(0, colon), port));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

FaultProxy::FaultProxy(int listen_fd, std::string address, std::string target_host,
                       int target_port)
    : listen_fd_(listen_fd),
      address_(std::move(address)),
      target_host_(std::move(target_host)),
      target_port_(target_port) {}

FaultProxy::~FaultProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(conn_threads_);
  }
  for (std::thread& t : threads) t.join();
  close(listen_fd_);
}

void FaultProxy::CutAll(CutMode mode) {
  absl::MutexLock lock(&mu_);
  ++cut_generation_;
  cut_mode_ = mode;
}

void FaultProxy::CutAfter(Direction dir, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  budget_[static_cast<int>(dir)] = static_cast<int64_t>(bytes);
}

void FaultProxy::SetDelay(absl::Duration delay) { delay_us_ = absl::ToInt64Microseconds(delay); }

void FaultProxy::SetBlackHole(bool on) { black_hole_ = on; }

size_t FaultProxy::Allow(int dir, size_t want) {
  absl::MutexLock lock(&mu_);
  if (budget_[dir] < 0) return want;
  size_t n = std::min<uint64_t>(want, static_cast<uint64_t>(budget_[dir]));
  budget_[dir] -= static_cast<int64_t>(n);
  if (budget_[dir] == 0 && n < want) {  // the budget is spent and more wants through: cut
    budget_[dir] = -1;
    ++cut_generation_;
    cut_mode_ = CutMode::kReset;
  }
  return n;
}

void FaultProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ++accepted_;
    auto conn = std::make_shared<Conn>();
    conn->fd[0] = fd;
    absl::MutexLock lock(&mu_);
    conn->generation = cut_generation_;
    conn_threads_.emplace_back([this, conn] { Serve(conn); });
  }
}

void FaultProxy::Serve(std::shared_ptr<Conn> conn) {
  int* fd = conn->fd;
  // Returns the cut mode if a cut was ordered since this connection opened.
  auto cut_ordered = [&](CutMode* mode) {
    absl::MutexLock lock(&mu_);
    *mode = cut_mode_;
    return cut_generation_ != conn->generation;
  };
  auto finish = [&](bool reset) {
    CloseSocket(fd[0], reset);
    CloseSocket(fd[1], reset);
  };
  CutMode mode = CutMode::kReset;
  while (black_hole_ && !stop_ && !cut_ordered(&mode)) absl::SleepFor(absl::Milliseconds(kTickMs));
  if (stop_ || cut_ordered(&mode)) {
    if (!stop_) ++cuts_;
    return finish(mode == CutMode::kReset);
  }
  bool ok = false;
  sockaddr_in target = Loopback(target_host_, target_port_, &ok);
  fd[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd[1] < 0 || connect(fd[1], reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
    return finish(/*reset=*/true);  // the target is down: the client sees a reset
  }
  int one = 1;
  for (int i = 0; i < 2; ++i) {
    SetNonBlocking(fd[i]);
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  std::deque<Piece> queue[2];  // queue[d]: read from fd[d], to be written to fd[1 - d]
  size_t queued[2] = {0, 0};
  bool eof[2] = {false, false}, shut[2] = {false, false};
  char buf[kReadBytes];
  while (!stop_) {
    const bool cut = cut_ordered(&mode);  // checked before the writes, acted on after them
    const bool hole = black_hole_;
    const absl::Time now = absl::Now();
    for (int d = 0; d < 2 && !hole; ++d) {  // write what is due
      while (!queue[d].empty() && queue[d].front().ready <= now) {
        Piece& p = queue[d].front();
        ssize_t n = send(fd[1 - d], p.data.data() + p.written, p.data.size() - p.written,
                         MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0) return finish(/*reset=*/true);
        p.written += n;
        forwarded_[d] += n;
        if (p.written < p.data.size()) break;
        queued[d] -= p.data.size();
        queue[d].pop_front();
      }
      if (eof[d] && queue[d].empty() && !shut[d]) {  // pass the half-close on
        shutdown(fd[1 - d], SHUT_WR);
        shut[d] = true;
      }
    }
    if (cut) {  // what was allowed through before the cut has been written (if due)
      ++cuts_;
      return finish(mode == CutMode::kReset);
    }
    if (shut[0] && shut[1]) return finish(/*reset=*/false);
    pollfd p[2];
    for (int i = 0; i < 2; ++i) {
      p[i] = {fd[i], 0, 0};
      if (!hole && !eof[i] && queued[i] < kMaxQueued) p[i].events |= POLLIN;
      if (!hole && !queue[1 - i].empty() && queue[1 - i].front().ready <= now) {
        p[i].events |= POLLOUT;
      }
    }
    if (poll(p, 2, kTickMs) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0 || (p[i].events & POLLIN) == 0) continue;
      ssize_t n = recv(fd[i], buf, sizeof(buf), 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n < 0) return finish(/*reset=*/true);  // a reset from one side reaches the other
      if (n == 0) {
        eof[i] = true;
        continue;
      }
      size_t allowed = Allow(i, static_cast<size_t>(n));  // the rest is dropped: a cut follows
      if (allowed == 0) continue;
      queue[i].push_back(Piece{now + absl::Microseconds(delay_us_.load()),
                               std::string(buf, allowed), 0});
      queued[i] += allowed;
    }
  }
  finish(/*reset=*/true);
}

}  // namespace zerostate::testing
