#include "tests/testing/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace zerostate::testing {
namespace {

constexpr char kListeningOn[] = "listening on ";
constexpr char kMetricsOn[] = "metrics on ";
constexpr char kDataPlaneOn[] = "data plane on ";

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

// The whitespace-free token that follows `marker` in `line`, or "".
std::string TokenAfter(const std::string& line, const char* marker) {
  size_t pos = line.find(marker);
  if (pos == std::string::npos) return "";
  pos += strlen(marker);
  size_t end = line.find_first_of(" \t\r\n", pos);
  return line.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

// Milliseconds left until `deadline`, for poll(): -1 when infinite.
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Waits for `fd` to be readable. False on timeout.
bool PollReadable(int fd, absl::Time deadline) {
  pollfd p{fd, POLLIN, 0};
  while (true) {
    int n = poll(&p, 1, PollTimeoutMs(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // let the read report the error
  }
}

}  // namespace

ServerProcess::ServerProcess(ServerProcessOptions options) : options_(std::move(options)) {}

ServerProcess::~ServerProcess() {
  (void)Kill();
  JoinForwarding();
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(ServerProcessOptions options,
                                                                    int port) {
  if (options.binary.empty()) {
    return absl::InvalidArgumentError("ServerProcessOptions.binary: empty server path");
  }
  // Another build's server, e.g. an old commit's, to check that a test
  // fails against it (docs/reliability.md).
  const char* other = getenv("ZEROSTATE_TEST_SERVER_BINARY");
  if (other != nullptr && *other != '\0' &&
      absl::EndsWith(options.binary, "zerostate-server")) {
    options.binary = other;
  }
  if (port == 0 && options.fixed_port) {
    int fd = ListenOnLoopback(&port);
    if (fd < 0) return absl::InternalError(absl::StrCat("no free port: ", strerror(errno)));
    close(fd);
  }
  std::unique_ptr<ServerProcess> server(new ServerProcess(std::move(options)));
  if (absl::Status s = server->Spawn(port); !s.ok()) return s;
  if (absl::Status s = server->AwaitListening(); !s.ok()) return s;
  return server;
}

absl::Status ServerProcess::Spawn(int port) {
  std::vector<std::string> args = {options_.binary,
                                   absl::StrCat("--listen=", options_.host, ":", port)};
  if (options_.plaintext) args.push_back("--plaintext");
  args.insert(args.end(), options_.args.begin(), options_.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int err_fd = -1;
  if (!options_.stderr_path.empty()) {
    err_fd = open(options_.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      return absl::InternalError(
          absl::StrCat("stderr_path '", options_.stderr_path, "': ", strerror(errno)));
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    if (err_fd >= 0) close(err_fd);
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (err_fd >= 0) close(err_fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    dup2(fds[1], STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  if (err_fd >= 0) close(err_fd);
  pid_ = pid;
  stdout_fd_ = fds[0];
  pending_.clear();
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd_ < 0) {
    absl::Status s = absl::InternalError(absl::StrCat("pidfd_open: ", strerror(errno)));
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return s;
  }
  return absl::OkStatus();
}

absl::Status ServerProcess::AwaitListening() {
  absl::Time deadline = absl::Now() + options_.start_timeout;
  char buf[4096];
  while (true) {
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      std::string addr = TokenAfter(line, kListeningOn);
      if (std::string data = TokenAfter(line, kDataPlaneOn); !data.empty()) data_address_ = data;
      if (addr.empty()) {
        fprintf(stderr, "[server starting] %s\n", line.c_str());
        continue;
      }
      size_t colon = addr.rfind(':');
      if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port_)) {
        (void)Kill();
        return absl::InternalError(absl::StrCat("cannot parse the listening line: ", line));
      }
      address_ = addr;
      metrics_address_ = TokenAfter(line, kMetricsOn);
      StartForwarding();
      return absl::OkStatus();
    }
    if (!PollReadable(stdout_fd_, deadline)) {
      (void)Kill();
      return absl::DeadlineExceededError(
          absl::StrCat(options_.binary, " printed no '", kListeningOn, "' line within ",
                       absl::FormatDuration(options_.start_timeout), "; killed"));
    }
    ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n > 0) {
      pending_.append(buf, n);
    } else if (n == 0 || errno != EINTR) {
      absl::StatusOr<int> status = WaitExit(absl::InfiniteDuration());
      return absl::InternalError(absl::StrCat(
          options_.binary, " exited before it listened: ",
          status.ok() ? DescribeWaitStatus(*status) : status.status().ToString()));
    }
  }
}

void ServerProcess::StartForwarding() {
  int fd = stdout_fd_;
  stdout_fd_ = -1;
  std::string prefix = absl::StrCat("[server ", port_, "] ");
  forwarder_ = std::thread([fd, prefix, text = std::move(pending_)]() mutable {
    char buf[4096];
    while (true) {
      size_t nl;
      while ((nl = text.find('\n')) != std::string::npos) {
        fprintf(stderr, "%s%s\n", prefix.c_str(), text.substr(0, nl).c_str());
        text.erase(0, nl + 1);
      }
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, n);
    }
    if (!text.empty()) fprintf(stderr, "%s%s\n", prefix.c_str(), text.c_str());
    close(fd);
  });
}

void ServerProcess::JoinForwarding() {
  if (forwarder_.joinable()) forwarder_.join();
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

absl::StatusOr<int> ServerProcess::WaitExit(absl::Duration timeout) {
  absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  if (!PollReadable(pidfd_, deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("server pid ", pid_, " still running"));
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  close(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
  JoinForwarding();
  return status;
}

absl::Status ServerProcess::Stop() {
  if (!running()) return absl::OkStatus();
  kill(pid_, SIGTERM);
  absl::StatusOr<int> status = WaitExit(options_.stop_timeout);
  if (!status.ok()) {
    (void)Kill();
    return absl::DeadlineExceededError(absl::StrCat("server ", address_, " did not exit within ",
                                                    absl::FormatDuration(options_.stop_timeout),
                                                    " of SIGTERM; killed"));
  }
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("server ", address_, " stopped with ", DescribeWaitStatus(*status)));
}

absl::Status ServerProcess::Kill() {
  if (!running()) return absl::OkStatus();
  kill(pid_, SIGKILL);
  return WaitExit(absl::InfiniteDuration()).status();
}

absl::Status ServerProcess::Restart() {
  if (running()) {
    return absl::FailedPreconditionError(absl::StrCat("server ", address_, " is still running"));
  }
  int old_port = port_;
  if (absl::Status s = Spawn(old_port); !s.ok()) return s;
  if (absl::Status s = AwaitListening(); !s.ok()) return s;
  if (port_ != old_port) {
    return absl::InternalError(absl::StrCat("restarted server listens on port ", port_,
                                            ", not on ", old_port));
  }
  return absl::OkStatus();
}

double MetricValue(const std::string& page, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (!absl::ConsumePrefix(&line, name + " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

int ListenOnLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 1) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

absl::Status ConnectOnLoopback(int* client, int* server) {
  int port = 0;
  int listener = ListenOnLoopback(&port);
  if (listener < 0) return absl::UnavailableError(absl::StrCat("listen: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*client < 0 || connect(*client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status s = absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
    if (*client >= 0) close(*client);
    close(listener);
    return s;
  }
  *server = accept(listener, nullptr, nullptr);
  absl::Status s = *server < 0 ? absl::UnavailableError(absl::StrCat("accept: ", std::strerror(errno)))
                               : absl::OkStatus();
  if (*server < 0) close(*client);
  close(listener);
  return s;
}

absl::StatusOr<std::string> ScrapeMetrics(const std::string& address, absl::Duration timeout) {
  size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not IPv4:PORT"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status s =
        absl::UnavailableError(absl::StrCat("metrics at ", address, ": ", strerror(errno)));
    if (fd >= 0) close(fd);
    return s;
  }
  if (timeout != absl::InfiniteDuration()) {
    timeval tv = absl::ToTimeval(timeout);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  std::string body;
  if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, n);
  }
  close(fd);
  if (body.empty()) {
    return absl::UnavailableError(absl::StrCat("metrics at ", address, ": no answer"));
  }
  return body;
}

absl::StatusOr<std::unique_ptr<ServerCluster>> ServerCluster::Start(
    int n, const ServerProcessOptions& options) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("n: ", n, " servers, need >= 1"));
  auto cluster = std::make_unique<ServerCluster>();
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<ServerProcess>> s = ServerProcess::Start(options);
    if (!s.ok()) {
      return absl::Status(s.status().code(),
                          absl::StrCat("server ", i, " of ", n, ": ", s.status().message()));
    }
    cluster->servers_.push_back(*std::move(s));
  }
  return cluster;
}

std::vector<std::string> ServerCluster::addresses() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) out.push_back(s->address());
  return out;
}

absl::Status ServerCluster::StopAll() {
  absl::Status first;
  for (auto& s : servers_) first.Update(s->Stop());
  return first;
}

}  // namespace zerostate::testing
