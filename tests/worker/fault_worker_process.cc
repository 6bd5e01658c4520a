#include "tests/worker/fault_worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

extern char** environ;

namespace zerostate::testing {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

WorkerProcess::WorkerProcess(const std::string& binary, const std::vector<std::string>& env,
                             const std::vector<std::string>& flags, std::string log)
    : log_(std::move(log)) {
  // Another build's worker, e.g. an old commit's, to check that a test
  // fails against it (docs/reliability.md).
  const char* other = getenv("ZEROSTATE_TEST_WORKER_BINARY");
  const bool replace = other != nullptr && *other != '\0' &&
                       absl::EndsWith(binary, "zerostate-worker");
  std::vector<std::string> args = {replace ? std::string(other) : binary};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<std::string> envs = env;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  for (auto& e : envs) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

WorkerProcess::~WorkerProcess() {
  if (status_ == -3 && pid_ > 0) {
    Kill();
    Wait(absl::Seconds(10));
  }
}

std::string WorkerProcess::Log() const { return ReadFileOrEmpty(log_); }

bool WorkerProcess::Exited() const {
  siginfo_t info{};
  return waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
}

bool WorkerProcess::AwaitLog(const std::string& needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Log().find(needle) != std::string::npos) return true;
    if (status_ != -3 || Exited()) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

int WorkerProcess::Wait(absl::Duration timeout) {
  if (status_ != -3 || pid_ <= 0) return status_;
  const absl::Time deadline = absl::Now() + timeout;
  int raw = 0;
  pid_t got = 0;
  while ((got = waitpid(pid_, &raw, WNOHANG)) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (got == 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &raw, 0);
    return status_ = -2;
  }
  return status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

void WorkerProcess::Kill() {
  if (status_ == -3 && pid_ > 0) ::kill(pid_, SIGKILL);
}

}  // namespace zerostate::testing
