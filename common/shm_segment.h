// The same-host data plane's shared memory (docs/architecture.md, "Decision:
// a same-host data plane through shared memory"): a client that shares a
// host with a state server reaches it over an abstract unix-domain socket
// named after the server's TCP data port (ShmSocketName), hands it a memfd
// segment with SCM_RIGHTS, and from then on the frames of common/frame.h
// travel on that socket while their payloads stay in the segment (meta
// fields shm_offset / shm_bytes, header payload_len 0): the client writes
// a push's payload into the segment and the server folds straight from it;
// the server writes gather pieces into it and the client copies them out.
//
// A segment is created by the client, page-aligned and long-lived (one per
// connection, mapped for the connection's life), so it can be registered
// with the CUDA runtime (cudaHostRegister) and copied into by the GPU. It
// is sealed against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW)
// before it is handed over: a peer that truncated it would make the other
// side's access fault; Attach refuses an unsealed one.
// Thread-safe (the mapping does not change after construction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zerostate {

// The abstract unix socket name (without its leading NUL) of the server
// whose TCP data plane listens on `data_port`: unique on a host (network
// namespace) because the TCP port is.
std::string ShmSocketName(int data_port);

class ShmSegment {
 public:
  // A new sealed memfd segment of `bytes` (> 0, rounded up to whole
  // pages), zeroed. With `populate`, its pages are allocated (charged to
  // this process) and mapped now, so that no access faults, here or in a
  // peer that attaches with `populate`. Errors: INVALID_ARGUMENT (bytes
  // 0), UNAVAILABLE (the kernel refused; with the reason).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(size_t bytes,
                                                                          bool populate = false);
  // Maps the segment `fd` (owned from now on, closed on error too) a peer
  // handed over. With `populate`, every page is mapped now (each first
  // write would fault on its own) if the peer allocated them all (a
  // sparse one is mapped lazily: this process never allocates the peer's
  // memory). Errors: FAILED_PRECONDITION (not sealed against shrinking
  // and growing, or empty), UNAVAILABLE (cannot map; the reason).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmSegment>> Attach(int fd,
                                                                          bool populate = false);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int fd() const { return fd_; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The `bytes` bytes at `offset`. Errors: INVALID_ARGUMENT naming the
  // range and the segment's size when they do not lie inside it.
  [[nodiscard]] absl::StatusOr<uint8_t*> At(uint64_t offset, uint64_t bytes) const;

 private:
  ShmSegment(int fd, uint8_t* data, size_t size) : fd_(fd), data_(data), size_(size) {}
  // Maps `bytes` of `fd` (owned; closed on error), every page at once
  // with `populate`. Errors: UNAVAILABLE.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmSegment>> Map(int fd, size_t bytes,
                                                                       bool populate);
  const int fd_;
  uint8_t* const data_;
  const size_t size_;
};

// Listens on ShmSocketName(data_port). Errors: UNAVAILABLE (the name is
// taken, or the socket cannot be made; with the reason).
[[nodiscard]] absl::StatusOr<int> ListenShm(int data_port);
// Connects to ShmSocketName(data_port). Errors: UNAVAILABLE (no such
// server on this host, with the reason).
[[nodiscard]] absl::StatusOr<int> ConnectShm(int data_port);
// Sends `segment_fd` over unix socket `sock` (one byte with SCM_RIGHTS).
// Errors: UNAVAILABLE.
[[nodiscard]] absl::Status SendSegmentFd(int sock, int segment_fd);
// Receives the descriptor SendSegmentFd sent, waiting until `deadline`.
// Errors: DEADLINE_EXCEEDED, UNAVAILABLE (closed, or a message without
// exactly one descriptor).
[[nodiscard]] absl::StatusOr<int> RecvSegmentFd(int sock, absl::Time deadline);

}  // namespace zerostate
