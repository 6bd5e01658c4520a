// The client's connections to one server's TCP data plane
// (server/dataplane/data_plane.h): a pool of persistent connections, one taken per
// push or gather stream and given back when the stream ended cleanly (a
// connection that broke or stopped mid-conversation is closed instead),
// plaintext or TLS (common/data_tls.h; the handshake is part of Acquire).
// When the server shares this host, a new connection is made to its
// same-host plane instead (client/shm_conn.h): a unix socket whose payloads
// travel in a shared memory segment; if that cannot be attached, the pool
// uses TCP from then on.
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/conn_cutter.h"
#include "client/shared_buffer.h"
#include "common/data_stream.h"
#include "common/frame_io.h"
#include "common/shm_segment.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace zerostate::client {

// One connection; closed when destroyed.
class DataConn {
 public:
  // Owns `fd` and `stream` (which runs on fd), and the same-host plane's
  // segment `shm` unless null.
  DataConn(int fd, std::unique_ptr<DataStream> stream, std::unique_ptr<ShmSegment> shm = nullptr)
      : fd_(fd), stream_(std::move(stream)), shm_(std::move(shm)) {}
  ~DataConn();
  DataConn(const DataConn&) = delete;
  DataConn& operator=(const DataConn&) = delete;

  int fd() const { return fd_; }
  DataStream& stream() { return *stream_; }
  // Scratch memory for encoded or received payloads.
  FrameBuffer& buffer() { return buffer_; }
  // The segment payloads travel in (same-host plane), or null (TCP).
  const ShmSegment* shm() const { return shm_.get(); }

  // The shared buffers (client/shared_buffer.h) this same-host
  // connection's server was asked to map (ShareBuffer, client/shm_conn.h):
  // Mapped(id) is the buffer once it did (held by the connection from
  // then on), null otherwise; Refused(id) once it said no. Used by the
  // connection's holder only.
  const SharedBuffer* Mapped(uint32_t id) const;
  bool Refused(uint32_t id) const;
  void AddShared(std::shared_ptr<const SharedBuffer> buffer, bool mapped);

  // Puts the socket under `cutter` (once; later calls do nothing) until
  // the connection is closed.
  void Watch(std::shared_ptr<ConnCutter> cutter);

 private:
  const int fd_;
  std::shared_ptr<ConnCutter> cutter_;
  std::unique_ptr<DataStream> stream_;
  std::unique_ptr<ShmSegment> shm_;
  std::vector<std::shared_ptr<const SharedBuffer>> mapped_;  // few: searched in order
  std::vector<uint32_t> refused_;
  FrameBuffer buffer_;
};

// Where a DataConnPool tries a server on this host first (port 0: never).
struct SameHostPlane {
  int port = 0;              // the server's TCP data port: names its unix socket
  uint64_t incarnation = 0;  // the server's, seen at register: it must answer with it
  size_t segment_bytes = 0;  // of each connection's segment
};

class DataConnPool {
 public:
  // Connections to `address` ("host:port"); at most `max_idle` are kept.
  // Under TLS with `tls` (a client context, ClientTlsContext) unless null.
  // New connections try `same_host` first, unless its port is 0.
  // With `cutter` (unless null), every connection it hands out is under
  // it, and Acquire fails while it is cut.
  DataConnPool(std::string address, size_t max_idle, std::shared_ptr<SSL_CTX> tls = nullptr,
               SameHostPlane same_host = {}, std::shared_ptr<ConnCutter> cutter = nullptr);

  const std::string& address() const { return address_; }
  // Whether the pool still tries the same-host plane for new connections.
  bool tries_same_host() const {
    absl::MutexLock lock(&mu_);
    return same_host_.port != 0 && !same_host_failed_;
  }

  // An idle connection, or a new one (connected, and its TLS handshake
  // done; or attached to the same-host plane). Errors: UNAVAILABLE naming the address (cannot
  // resolve or connect, or the handshake failed: with OpenSSL's reason), DEADLINE_EXCEEDED.
  // The same-host plane falls back to TCP only while it has never
  // attached and no other server answered there: another incarnation on
  // the unix socket (FAILED_PRECONDITION), or a server that attached
  // before and no longer answers (UNAVAILABLE), is the registered server
  // gone, and its TCP port may be anyone's now (another server, another
  // program); the error goes to the caller, whose call goes over gRPC,
  // which says the server restarted.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<DataConn>> Acquire(absl::Time deadline);
  // Keeps `conn` for another stream. Only for a connection at a frame
  // boundary with nothing left to read.
  void Release(std::unique_ptr<DataConn> conn);
  // A connection broke: closes the idle ones, opened to the same server
  // process. Were that process gone (a restarted server), each would fail
  // the next attempt in turn, one retry and backoff apiece, before an
  // attempt reached the new process and heard that it lost the job.
  void DropIdle();

 private:
  // Acquire without the cutter.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<DataConn>> Take(absl::Time deadline);
  // The handshake of connected socket `fd` (plaintext: none).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<DataConn>> Open(int fd, absl::Time deadline);

  const std::string address_;
  const size_t max_idle_;
  const std::shared_ptr<SSL_CTX> tls_;
  const SameHostPlane same_host_;
  const std::shared_ptr<ConnCutter> cutter_;
  mutable absl::Mutex mu_;
  // The same-host plane could not be attached: TCP from then on.
  bool same_host_failed_ ABSL_GUARDED_BY(mu_) = false;
  // It was attached once: the server answers there.
  bool same_host_attached_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<DataConn>> idle_ ABSL_GUARDED_BY(mu_);
};

// "host:port" of the data plane of a server whose gRPC address is
// `grpc_address` and whose data port is `port` ("dns:///h:p", "ipv4:h:p"
// and "[v6]:p" forms included).
std::string DataAddress(const std::string& grpc_address, int port);

}  // namespace zerostate::client
