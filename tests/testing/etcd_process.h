// A real etcd server (Debian's /usr/bin/etcd, v3.4) for tests of
// membership and fencing: one member on 127.0.0.1, free client and peer
// ports, its data in a fresh temporary directory that is removed with it.
// Its log goes to a file in that directory (LogTail() for failures).
//
// Tests that need one skip when the binary is missing:
//   if (!EtcdProcess::Available()) GTEST_SKIP() << "no /usr/bin/etcd";
//
// The child is started with PR_SET_PDEATHSIG=SIGKILL (it dies with the
// thread that started it). Thread safety: one thread at a time.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zerostate::testing {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";

class EtcdProcess {
 public:
  // Whether `binary` exists and is executable.
  static bool Available(const std::string& binary = kEtcdBinary);

  // Starts etcd and waits (up to `timeout`) until it says it serves client
  // requests. Errors: INTERNAL (no temporary directory, fork/exec failed,
  // or etcd exited: the message has its log's tail), DEADLINE_EXCEEDED.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(
      const std::string& binary = kEtcdBinary, absl::Duration timeout = absl::Seconds(30));

  // SIGKILL (after SIGCONT), reaps it and removes its directory.
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "127.0.0.1:PORT", its client endpoint.
  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }

  // SIGSTOP / SIGCONT: etcd stops answering (its connections stay open)
  // and then resumes; leases whose time ran out meanwhile may expire as
  // soon as it runs again.
  absl::Status Freeze();
  absl::Status Thaw();

  // The last `bytes` of its log.
  std::string LogTail(size_t bytes = 4000) const;

 private:
  EtcdProcess() = default;
  absl::Status AwaitReady(int fd, absl::Duration timeout);

  std::string dir_;
  std::string log_path_;
  std::string endpoint_;
  pid_t pid_ = -1;
  std::thread forwarder_;  // etcd's stderr, after the ready line, to the log
};

}  // namespace zerostate::testing
