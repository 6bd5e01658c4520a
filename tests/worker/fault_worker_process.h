// zerostate-worker processes for fault tests: start one as a launcher
// would (extra environment variables and flags, output to a log file),
// watch its log, kill it, and wait for it with a bound.
// Thread safety: one thread per WorkerProcess.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace zerostate::testing {

class WorkerProcess {
 public:
  // Starts `binary` with `flags`, this environment plus `env`, stdout and
  // stderr to `log`. pid() is -1 if it could not be started. The
  // environment variable ZEROSTATE_TEST_WORKER_BINARY, when set, replaces a
  // `binary` that ends in "zerostate-worker" (another build's worker).
  WorkerProcess(const std::string& binary, const std::vector<std::string>& env,
                const std::vector<std::string>& flags, std::string log);
  // Kills (SIGKILL) and reaps it if still running.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_; }
  std::string Log() const;

  // Waits until the log contains `needle` (true) or the process exited or
  // `timeout` passed (false).
  bool AwaitLog(const std::string& needle, absl::Duration timeout);
  // Waits for the exit: its code, -1 for a signal, -2 if it ran past
  // `timeout` (it is then killed).
  int Wait(absl::Duration timeout);
  // SIGKILL: a crash.
  void Kill();

 private:
  bool Exited() const;  // without reaping

  pid_t pid_ = -1;
  std::string log_;
  int status_ = -3;  // exit code once reaped
};

// The whole content of `path` ("" if it cannot be read).
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace zerostate::testing
