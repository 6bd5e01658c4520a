// A child process driven through two pipes: the parent writes lines to its
// stdin and reads lines from its stdout; its stderr is the parent's. For
// benchmarks that run their clients as separate processes (load_bench).
//
// The child is started with PR_SET_PDEATHSIG=SIGKILL: it dies with the
// thread that started it. Start children from a thread that outlives them.
//
// Thread safety: one thread at a time per object.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zerostate::bench {

class ChildProcess {
 public:
  // Starts argv[0] with arguments argv[1..]. Errors: INVALID_ARGUMENT (empty
  // argv), INTERNAL (pipe or fork failed; exec failures show as exit 127).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(std::vector<std::string> argv);

  // Kills the child (SIGKILL) if it still runs, and reaps it.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Writes `line` and a newline to the child's stdin. INTERNAL on error.
  absl::Status WriteLine(const std::string& line);

  // The next line of the child's stdout, without its newline.
  // Errors: OUT_OF_RANGE (the child closed stdout), DEADLINE_EXCEEDED, INTERNAL.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline);

  // Waits for the child to exit. OK for exit status 0, else INTERNAL naming
  // the exit status or signal; DEADLINE_EXCEEDED (the child is then killed).
  absl::Status Wait(absl::Time deadline);

 private:
  ChildProcess() = default;

  pid_t pid_ = -1;
  int stdin_fd_ = -1;   // write end of the child's stdin
  int stdout_fd_ = -1;  // read end of the child's stdout
  std::string pending_;  // bytes read but not yet a whole line
};

}  // namespace zerostate::bench
