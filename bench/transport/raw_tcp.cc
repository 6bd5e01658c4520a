#include "bench/transport/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerostate::bench {
namespace {

constexpr size_t kIoBytes = 1 << 20;

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

// Sends `bytes` on `fd` once the receiver's one-byte go signal arrives.
void SendAll(int fd, uint64_t bytes) {
  std::vector<char> buf(kIoBytes, 'x');
  char go;
  if (read(fd, &go, 1) != 1) return;
  while (bytes > 0) {
    ssize_t n = write(fd, buf.data(), std::min<uint64_t>(bytes, buf.size()));
    if (n <= 0) return;
    bytes -= n;
  }
  close(fd);
}

// The sender process: connects, sends, exits.
[[noreturn]] void RunSender(uint16_t port, int connections, uint64_t total_bytes) {
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(1);
    uint64_t share = total_bytes / connections + (i == 0 ? total_bytes % connections : 0);
    threads.emplace_back(SendAll, fd, share);
  }
  for (auto& t : threads) t.join();
  _exit(0);
}

uint64_t ReceiveAll(int fd) {
  std::vector<char> buf(kIoBytes);
  uint64_t total = 0;
  ssize_t n;
  while ((n = read(fd, buf.data(), buf.size())) > 0) total += n;
  close(fd);
  return total;
}

absl::StatusOr<int> Listen(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return Errno("listen");
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

absl::StatusOr<double> MeasureRawTcp(int connections, uint64_t total_bytes) {
  uint16_t port = 0;
  absl::StatusOr<int> listener = Listen(&port);
  if (!listener.ok()) return listener.status();
  pid_t pid = fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) RunSender(port, connections, total_bytes);
  std::vector<int> fds;
  for (int i = 0; i < connections; ++i) {
    int fd = accept(*listener, nullptr, nullptr);
    if (fd < 0) return Errno("accept");
    fds.push_back(fd);
  }
  close(*listener);
  auto start = std::chrono::steady_clock::now();
  for (int fd : fds) (void)!write(fd, "g", 1);
  std::vector<uint64_t> got(connections);
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back([&got, &fds, i] { got[i] = ReceiveAll(fds[i]); });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int status = 0;
  waitpid(pid, &status, 0);
  uint64_t received = 0;
  for (uint64_t g : got) received += g;
  if (received != total_bytes || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("raw TCP: received ", received, " of ", total_bytes,
                                            " bytes, sender status ", status));
  }
  return received / seconds;
}

}  // namespace zerostate::bench
