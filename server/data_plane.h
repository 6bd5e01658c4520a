// The state server's TCP data plane: a listener next to the gRPC port that
// serves PushGradients and Gather as framed messages over plain TCP
// (common/frame.h), a thread per connection (clients hold a few persistent
// connections per server, so threads stay few, and a gather that waits for
// a version simply blocks its own thread). docs/architecture.md says why
// there are two planes. Only for plaintext servers: plain TCP cannot carry
// the guarantees of TLS.
// Thread-safe.
#pragma once

#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/data_session.h"

namespace zerostate::server {

class DataPlane {
 public:
  // Listens on `listen` ("host:port", IPv4 or a name; port 0: any free
  // port) and serves connections with `ctx` (whose pointers must outlive
  // the DataPlane). Errors: INVALID_ARGUMENT (not host:port; names
  // --data_listen), UNAVAILABLE (cannot bind; names the address).
  static absl::StatusOr<std::unique_ptr<DataPlane>> Start(const std::string& listen,
                                                          const DataSessionContext& ctx);
  // Shutdown(), then joins every thread.
  ~DataPlane();

  // The bound port.
  int port() const { return port_; }

  // Stops accepting and breaks every open connection (their sessions end
  // at their next read or write). Idempotent.
  void Shutdown();

 private:
  struct Conn {
    int fd;
    std::thread thread;
    bool done = false;
  };
  DataPlane(int listen_fd, int port, const DataSessionContext& ctx);
  void AcceptLoop();
  // Joins and forgets sessions that ended. REQUIRES: mu_ held.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
  const int port_;
  const DataSessionContext ctx_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Conn> conns_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace zerostate::server
