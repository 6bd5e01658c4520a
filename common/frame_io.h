// Blocking socket I/O of data plane frames (common/frame.h), shared by the
// server's sessions and the client's connections: a frame goes out in one
// sendmsg of header, meta and payload straight from the caller's memory;
// a frame comes in as header and meta, then its payload read wherever the
// reader wants it (a reused aligned buffer, or the caller's output).
// Thread-compatible: one thread per socket at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/frame.h"

namespace zerostate {

// A growable 64-byte-aligned byte buffer, reused across frames; contents
// are not kept when it grows.
class FrameBuffer {
 public:
  FrameBuffer() = default;
  ~FrameBuffer();
  FrameBuffer(const FrameBuffer&) = delete;
  FrameBuffer& operator=(const FrameBuffer&) = delete;
  // At least `bytes` bytes.
  uint8_t* Reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// Sends one frame. Errors: UNAVAILABLE (the connection broke, with
// strerror), DEADLINE_EXCEEDED (the socket's send timeout passed).
absl::Status SendFrame(int fd, FrameType type, const v1::DataFrameMeta& meta,
                       const void* payload = nullptr, size_t payload_len = 0);

// Reads exactly `n` bytes. Errors: DATA_LOSS "connection closed after k of
// n bytes", UNAVAILABLE (strerror), DEADLINE_EXCEEDED (receive timeout).
absl::Status RecvExact(int fd, void* p, size_t n);

struct FrameStart {
  FrameHeader header;
  v1::DataFrameMeta meta;
};

// Reads a frame's header and meta; the payload (header.payload_len bytes)
// is left to the caller. nullopt: the peer closed the connection at a frame
// boundary. Errors: those of ParseFrameHeader / ParseFrameMeta
// (INVALID_ARGUMENT), DATA_LOSS "truncated frame: ..." when the peer closed
// mid-frame, those of RecvExact.
absl::StatusOr<std::optional<FrameStart>> RecvFrameStart(int fd);

// Sets the socket's send and receive timeouts to reach `deadline`
// (at least 1 ms; absl::InfiniteFuture(): none).
void SetSocketDeadline(int fd, absl::Time deadline);

// Sets TCP_NODELAY (socket buffers stay auto-tuned by the kernel).
void TuneDataSocket(int fd);

}  // namespace zerostate
