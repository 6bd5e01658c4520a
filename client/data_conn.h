// The client's connections to one server's TCP data plane
// (server/data_plane.h): a pool of persistent connections, one taken per
// push or gather stream and given back when the stream ended cleanly (a
// connection that broke or stopped mid-conversation is closed instead).
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/frame_io.h"

namespace zerostate::client {

// One connection; closed when destroyed.
class DataConn {
 public:
  explicit DataConn(int fd) : fd_(fd) {}
  ~DataConn();
  DataConn(const DataConn&) = delete;
  DataConn& operator=(const DataConn&) = delete;

  int fd() const { return fd_; }
  // Scratch memory for encoded or received payloads.
  FrameBuffer& buffer() { return buffer_; }

 private:
  const int fd_;
  FrameBuffer buffer_;
};

class DataConnPool {
 public:
  // Connections to `address` ("host:port"); at most `max_idle` are kept.
  DataConnPool(std::string address, size_t max_idle);

  const std::string& address() const { return address_; }

  // An idle connection, or a new one. Errors: UNAVAILABLE naming the
  // address (cannot resolve or connect), DEADLINE_EXCEEDED.
  absl::StatusOr<std::unique_ptr<DataConn>> Acquire(absl::Time deadline);
  // Keeps `conn` for another stream. Only for a connection at a frame
  // boundary with nothing left to read.
  void Release(std::unique_ptr<DataConn> conn);

 private:
  const std::string address_;
  const size_t max_idle_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<DataConn>> idle_ ABSL_GUARDED_BY(mu_);
};

// "host:port" of the data plane of a server whose gRPC address is
// `grpc_address` and whose data port is `port` ("dns:///h:p", "ipv4:h:p"
// and "[v6]:p" forms included).
std::string DataAddress(const std::string& grpc_address, int port);

}  // namespace zerostate::client
