// Real zerostate-server processes for integration tests and benchmarks:
// start one or N servers on 127.0.0.1 with ephemeral ports, read back the
// ports they print, stop them with SIGTERM or SIGKILL, and restart one on
// the same port (to play a server that crashed and came back).
//
// A server is started with `--listen=HOST:PORT` (PORT 0 = ephemeral),
// `--plaintext` unless options.plaintext is false, plus the caller's extra
// flags, and must print, on stdout, a line
//   zerostate-server listening on HOST:PORT metrics on ADDRESS
// once it accepts calls. Everything else it prints on stdout is forwarded to
// this process's stderr, prefixed with "[server PORT] ", so test logs show it.
//
// The child is started with PR_SET_PDEATHSIG=SIGKILL: it dies with the
// thread that started it, so a crashed test leaves no server behind.
// Start servers from a thread that outlives them (the test's main thread).
//
// Thread safety: a ServerProcess or ServerCluster is used by one thread at a
// time (the test body); different objects are independent.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zerostate::testing {

struct ServerProcessOptions {
  // Path of the zerostate-server binary. Required. The environment variable
  // ZEROSTATE_TEST_SERVER_BINARY, when set, replaces a path that ends in
  // "zerostate-server" (to run a test against another build's server; docs/reliability.md).
  std::string binary;
  // Extra flags, appended after --listen (e.g. "--threads=2").
  std::vector<std::string> args;
  // Where the child's stderr goes (appended; created if missing), for tests
  // that read the server's log. Empty: this process's stderr.
  std::string stderr_path;
  // Passes --plaintext after --listen: tests talk to the server over
  // loopback without TLS. False for tests that pass --tls_* in `args`.
  bool plaintext = true;
  // Host part of --listen.
  std::string host = "127.0.0.1";
  // Start on a port found free beforehand (on 127.0.0.1) instead of port 0,
  // when Start is given port 0: a server in an etcd cluster
  // (--etcd_endpoints) advertises its port, so it must know it before it
  // binds. Another process may take the port in between (rare).
  bool fixed_port = false;
  // How long Start waits for the "listening on" line.
  absl::Duration start_timeout = absl::Seconds(30);
  // How long Stop waits after SIGTERM before it sends SIGKILL.
  absl::Duration stop_timeout = absl::Seconds(20);
};

// One server process.
class ServerProcess {
 public:
  // Starts the binary listening on options.host:port (0 = ephemeral) and
  // waits until it prints its listening line. Errors: INVALID_ARGUMENT (no
  // binary), INTERNAL (fork/exec failed, or the process exited before it
  // listened: the message carries its exit status), DEADLINE_EXCEEDED (no
  // listening line within start_timeout; the process is killed).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(ServerProcessOptions options,
                                                              int port = 0);

  // Kills the process (SIGKILL) if it still runs, and reaps it.
  ~ServerProcess();

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // "HOST:PORT" of the gRPC port, as printed by the server.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // The metrics address as printed by the server ("" if it printed none).
  const std::string& metrics_address() const { return metrics_address_; }
  // The TCP data plane's address from the line "... data plane on HOST:PORT"
  // printed before the listening line ("" if none).
  const std::string& data_address() const { return data_address_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // SIGTERM, then waits up to stop_timeout for a clean exit (SIGKILL after
  // that). OK if the process exited with status 0; INTERNAL naming the exit
  // status or signal otherwise, DEADLINE_EXCEEDED if it had to be killed.
  // OK and a no-op if not running.
  absl::Status Stop();

  // SIGKILL and reap: a crash. OK and a no-op if not running.
  absl::Status Kill();

  // Starts the server again on the same port with the same flags.
  // REQUIRES: not running. Errors as Start.
  absl::Status Restart();

  // Waits up to `timeout` for the process to exit by itself and reaps it.
  // Returns the raw wait status, or DEADLINE_EXCEEDED (still running).
  absl::StatusOr<int> WaitExit(absl::Duration timeout);

 private:
  explicit ServerProcess(ServerProcessOptions options);
  absl::Status Spawn(int port);
  absl::Status AwaitListening();
  void StartForwarding();
  void JoinForwarding();

  const ServerProcessOptions options_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdout_fd_ = -1;  // read end of the child's stdout
  std::string pending_;  // stdout bytes read but not yet a full line
  std::string address_;
  std::string metrics_address_;
  std::string data_address_;
  int port_ = 0;
  std::thread forwarder_;
};

// The body of GET /metrics from a "HOST:PORT" metrics address (IPv4).
// Errors: UNAVAILABLE naming the address when it cannot be reached, or when
// no answer came within `timeout` of silence.
absl::StatusOr<std::string> ScrapeMetrics(const std::string& address,
                                          absl::Duration timeout = absl::InfiniteDuration());

// A socket listening on 127.0.0.1 on a free port, which it writes to
// `port`: an address in use, for tests of what a server or worker does
// then. The caller closes it. -1 on failure (errno set).
int ListenOnLoopback(int* port);

// Both ends of one new TCP connection over 127.0.0.1, into `client` and
// `server` (the caller closes them). Errors: UNAVAILABLE with the reason.
absl::Status ConnectOnLoopback(int* client, int* server);

// The value of series `name` on a Prometheus text page (from
// ScrapeMetrics), labels written as the page writes them
// (`x_total{method="Gather"}`); -1 when it is missing.
double MetricValue(const std::string& page, const std::string& name);

// N servers with the same options, in shard order.
class ServerCluster {
 public:
  // Starts `n` servers, each on an ephemeral port. Errors as
  // ServerProcess::Start, naming the server's index; servers already started
  // are killed.
  static absl::StatusOr<std::unique_ptr<ServerCluster>> Start(int n,
                                                              const ServerProcessOptions& options);

  int size() const { return static_cast<int>(servers_.size()); }
  ServerProcess& server(int i) { return *servers_[i]; }
  // Addresses in shard order, for ClientOptions::servers.
  std::vector<std::string> addresses() const;
  // Stops every running server with SIGTERM; the first error wins.
  absl::Status StopAll();

 private:
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

}  // namespace zerostate::testing
