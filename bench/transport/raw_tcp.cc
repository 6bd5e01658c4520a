#include "bench/transport/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/transport/cpu_usage.h"

namespace zerostate::bench {
namespace {

constexpr size_t kIoBytes = 1 << 20;

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

double Seconds(const rusage& u) {
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double SelfCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return Seconds(u);
}

// Where connection i of n moves its share of `total` bytes: the offset in
// a total-byte buffer, and the length.
std::pair<uint64_t, uint64_t> Share(int i, int n, uint64_t total) {
  const uint64_t each = total / n;
  return {i * each, each + (i == n - 1 ? total % n : 0)};
}

// Sends `bytes` on `fd` once the receiver's one-byte go signal arrives:
// from `from` onwards, or (null) the same 1 MiB buffer again and again.
void SendAll(int fd, const char* from, uint64_t bytes) {
  std::vector<char> buf(from == nullptr ? kIoBytes : 0, 'x');
  char go;
  if (read(fd, &go, 1) != 1) return;
  while (bytes > 0) {
    const char* p = from == nullptr ? buf.data() : from;
    ssize_t n = write(fd, p, std::min<uint64_t>(bytes, kIoBytes));
    if (n <= 0) return;
    bytes -= n;
    if (from != nullptr) from += n;
  }
  close(fd);
}

// The sender process: connects, sends, exits. Stores its CPU seconds
// before sending in *cpu_before (memory shared with the parent).
[[noreturn]] void RunSender(uint16_t port, int connections, uint64_t total_bytes, bool tensor,
                            double* cpu_before) {
  std::vector<char> tensor_bytes(tensor ? total_bytes : 0, 'x');  // written: its pages exist
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(1);
    auto [offset, share] = Share(i, connections, total_bytes);
    threads.emplace_back(SendAll, fd, tensor ? tensor_bytes.data() + offset : nullptr, share);
  }
  *cpu_before = SelfCpuSeconds();  // the threads wait for the go signal
  for (auto& t : threads) t.join();
  _exit(0);
}

// Reads `fd` to its end: into `into` onwards (at most `room` bytes), or
// (null) into the same 1 MiB buffer again and again.
uint64_t ReceiveAll(int fd, char* into, uint64_t room) {
  std::vector<char> buf(into == nullptr ? kIoBytes : 0);
  uint64_t total = 0;
  ssize_t n;
  while (true) {
    char* p = into == nullptr ? buf.data() : into + total;
    size_t want = into == nullptr ? kIoBytes : std::min<uint64_t>(kIoBytes, room - total);
    if (want == 0 || (n = read(fd, p, want)) <= 0) break;
    total += n;
  }
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

absl::StatusOr<RawTcpResult> MeasureRawTcp(int connections, uint64_t total_bytes,
                                           bool tensor_buffers) {
  // The sender's CPU seconds before it sends, written by the child.
  void* shared = mmap(nullptr, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
  if (shared == MAP_FAILED) return Errno("mmap");
  auto* sender_before = static_cast<double*>(shared);
  *sender_before = 0;
  uint16_t port = 0;
  absl::StatusOr<int> listener = Listen(&port);
  if (!listener.ok()) return listener.status();
  pid_t pid = fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) RunSender(port, connections, total_bytes, tensor_buffers, sender_before);
  std::vector<char> tensor(tensor_buffers ? total_bytes : 0, '\0');  // its pages exist
  std::vector<int> fds;
  for (int i = 0; i < connections; ++i) {
    int fd = accept(*listener, nullptr, nullptr);
    if (fd < 0) return Errno("accept");
    fds.push_back(fd);
  }
  close(*listener);
  const CpuSample host0 = SampleCpu({});
  const double self0 = SelfCpuSeconds();
  auto start = std::chrono::steady_clock::now();
  for (int fd : fds) (void)!write(fd, "g", 1);
  std::vector<uint64_t> got(connections);
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    auto [offset, share] = Share(i, connections, total_bytes);
    char* into = tensor_buffers ? tensor.data() + offset : nullptr;
    threads.emplace_back([&got, &fds, i, into, share] { got[i] = ReceiveAll(fds[i], into, share); });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const CpuSample host1 = SampleCpu({});
  int status = 0;
  rusage sender{};
  wait4(pid, &status, 0, &sender);
  uint64_t received = 0;
  for (uint64_t g : got) received += g;
  if (received != total_bytes || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("raw TCP: received ", received, " of ", total_bytes,
                                            " bytes, sender status ", status));
  }
  const double cpu = SelfCpuSeconds() - self0 + Seconds(sender) - *sender_before;
  munmap(shared, sizeof(double));
  return RawTcpResult{received / seconds, cpu, BusyFraction(host0, host1)};
}

}  // namespace zerostate::bench
