// Blocking I/O of data plane frames (common/frame.h) on a DataStream
// (plaintext or TLS; common/data_stream.h), shared by the server's sessions
// and the client's connections: a frame goes out in one send of header,
// meta and payload straight from the caller's memory (one sendmsg in
// plaintext and under kTLS);
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
#include "common/data_stream.h"
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
// the reason), DEADLINE_EXCEEDED (the stream's send deadline passed).
[[nodiscard]] absl::Status SendFrame(DataStream& stream, FrameType type,
                                     const v1::DataFrameMeta& meta, const void* payload = nullptr,
                                     size_t payload_len = 0);

// Reads exactly `n` bytes. Errors: DATA_LOSS "connection closed after k of
// n bytes", UNAVAILABLE (the reason), DEADLINE_EXCEEDED (the stream's
// receive deadline).
[[nodiscard]] absl::Status RecvExact(DataStream& stream, void* p, size_t n);

struct FrameStart {
  FrameHeader header;
  v1::DataFrameMeta meta;
};

// Reads a frame's header and meta; the payload (header.payload_len bytes)
// is left to the caller. nullopt: the peer closed the connection at a frame
// boundary. Errors: those of ParseFrameHeader / ParseFrameMeta
// (INVALID_ARGUMENT), DATA_LOSS "truncated frame: ..." when the peer closed
// mid-frame, those of RecvExact.
[[nodiscard]] absl::StatusOr<std::optional<FrameStart>> RecvFrameStart(DataStream& stream);

// Sets TCP_NODELAY (socket buffers stay auto-tuned by the kernel), and
// has the kernel end the connection (ETIMEDOUT on the next send or
// receive) once the peer's host is silent for kDeadPeerSeconds
// (common/liveness.h): a peer whose network is cut off fails its calls
// within seconds, as a crashed one does, instead of at their deadline (a
// gather waiting for a version sends nothing for as long as a step takes).
void TuneDataSocket(int fd);

}  // namespace zerostate
