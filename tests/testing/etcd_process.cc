#include "tests/testing/etcd_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/server_process.h"

namespace zerostate::testing {
namespace {

constexpr char kReady[] = "ready to serve client requests";

// A port free now on 127.0.0.1 (another process may take it before etcd
// binds it; unlikely among a test run's ephemeral ports).
absl::StatusOr<int> FreePort() {
  int port = 0;
  int fd = ListenOnLoopback(&port);
  if (fd < 0) return absl::InternalError(absl::StrCat("no free port: ", strerror(errno)));
  close(fd);
  return port;
}

// Appends `n` bytes to the file at `path`.
void Append(const std::string& path, const char* data, size_t n) {
  std::ofstream(path, std::ios::app).write(data, static_cast<std::streamsize>(n));
}

}  // namespace

bool EtcdProcess::Available(const std::string& binary) { return access(binary.c_str(), X_OK) == 0; }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::string& binary,
                                                                absl::Duration timeout) {
  std::unique_ptr<EtcdProcess> e(new EtcdProcess());
  const char* tmp = getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/zs-etcd-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
  }
  e->dir_ = pattern;
  e->log_path_ = e->dir_ + "/etcd.log";
  auto client = FreePort();
  auto peer = FreePort();
  if (!client.ok()) return client.status();
  if (!peer.ok()) return peer.status();
  e->endpoint_ = absl::StrCat("127.0.0.1:", *client);
  const std::string client_url = absl::StrCat("http://", e->endpoint_);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", *peer);
  std::vector<std::string> args = {binary,
                                   "--name=zs",
                                   "--data-dir=" + e->dir_ + "/data",
                                   "--listen-client-urls=" + client_url,
                                   "--advertise-client-urls=" + client_url,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=zs=" + peer_url};
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(pipefd[1], STDERR_FILENO);
    dup2(pipefd[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(pipefd[1]);
  e->pid_ = pid;
  if (auto st = e->AwaitReady(pipefd[0], timeout); !st.ok()) {
    close(pipefd[0]);
    return st;
  }
  e->forwarder_ = std::thread([fd = pipefd[0], path = e->log_path_] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) Append(path, buf, static_cast<size_t>(n));
    }
    close(fd);
  });
  return e;
}

absl::Status EtcdProcess::AwaitReady(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string seen;
  char buf[4096];
  while (seen.find(kReady) == std::string::npos) {
    int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd p{fd, POLLIN, 0};
    int ready = poll(&p, 1, ms);
    if (ready == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "etcd did not serve within ", absl::FormatDuration(timeout), "; log:\n", LogTail()));
    }
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("etcd exited before serving; log:\n", LogTail()));
    }
    Append(log_path_, buf, static_cast<size_t>(n));
    seen.append(buf, static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (forwarder_.joinable()) forwarder_.join();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

absl::Status EtcdProcess::Freeze() {
  if (kill(pid_, SIGSTOP) != 0)
    return absl::InternalError(absl::StrCat("SIGSTOP etcd: ", strerror(errno)));
  return absl::OkStatus();
}

absl::Status EtcdProcess::Thaw() {
  if (kill(pid_, SIGCONT) != 0)
    return absl::InternalError(absl::StrCat("SIGCONT etcd: ", strerror(errno)));
  return absl::OkStatus();
}

std::string EtcdProcess::LogTail(size_t bytes) const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

}  // namespace zerostate::testing
