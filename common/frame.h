// The frames of the TCP data plane (docs/architecture.md, "Decision: a
// second, plain TCP data plane"): every frame is a fixed 24-byte header,
// a DataFrameMeta message (proto/zerostate/v1/data_plane.proto) and raw
// payload bytes:
//
//   offset  size  field
//        0     4  magic "ZSDP" (bytes 'Z' 'S' 'D' 'P')
//        4     1  version (kFrameVersion)
//        5     1  type (FrameType)
//        6     2  reserved, zero
//        8     4  meta_len, little-endian, <= kMaxFrameMetaBytes
//       12     4  reserved, zero
//       16     8  payload_len, little-endian, <= kMaxFramePayloadBytes;
//                 zero unless the type carries a payload (PUSH, GATHER_PIECE,
//                 REPLICA_SUM)
//
// A client sends PUSH frames (each answered by one PUSH_ACK, in order; it
// may send several before reading the answers) and GATHER frames (answered
// by GATHER_PIECE frames and one GATHER_END). A frame the server cannot
// parse is answered by an ERROR frame naming what was wrong, and the
// connection is closed. On the same-host plane (common/shm_segment.h) the
// server first answers the segment with SHM_READY (code 0: attached), and
// PUSH and GATHER_PIECE carry their payload in the segment (meta shm_offset
// and shm_bytes, payload_len 0), or in a shared buffer of the client's
// that a SHM_BUFFER frame had the server map (meta shm_buffer). A
// shard's primary sends its backups each block's summed gradient of a
// step as a REPLICA_SUM (answered by one REPLICA_SUM_ACK each;
// server/replication/shard_replicator.h). The parser is strict: a frame
// is accepted only if every field above holds. Pure functions;
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/chunk_view.h"
#include "zerostate/v1/data_plane.pb.h"

namespace zerostate {

inline constexpr uint8_t kFrameMagic[4] = {'Z', 'S', 'D', 'P'};
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 24;
inline constexpr uint32_t kMaxFrameMetaBytes = 64 << 10;
inline constexpr uint64_t kMaxFramePayloadBytes = 64ull << 20;

enum class FrameType : uint8_t {
  kPush = 1,           // client -> server: token, chunk fields; payload
  kPushAck = 2,        // server -> client: incarnation, code, message, duplicate
  kGather = 3,         // client -> server: token, gather request, timeout
  kGatherPiece = 4,    // server -> client: chunk fields; payload
  kGatherEnd = 5,      // server -> client: incarnation, code, message, bytes
  kError = 6,          // server -> client: a frame it could not parse; then it closes
  kShmReady = 7,       // server -> client, same host only: incarnation, code, message
  kReplicaSum = 8,     // primary -> backup server: token, replica_sum; payload
  kReplicaSumAck = 9,  // backup -> primary: incarnation, code, message
  kShmBuffer = 10,     // client -> server, same host only: shm_buffer; then its memfd
};

// "PUSH", "GATHER_END", ...; "type <n>" for a value outside FrameType.
std::string FrameTypeName(uint8_t type);

struct FrameHeader {
  FrameType type = FrameType::kPush;
  uint32_t meta_len = 0;
  uint64_t payload_len = 0;
};

// The 24 header bytes of `header`.
void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);

// Checks and decodes 24 header bytes. Errors: INVALID_ARGUMENT
// "data plane frame: <what>" (bad magic, version, type, reserved bytes, a
// length over its cap, a payload on a type that carries none).
[[nodiscard]] absl::StatusOr<FrameHeader> ParseFrameHeader(const uint8_t bytes[kFrameHeaderBytes]);

// Decodes a frame's meta bytes. Errors: INVALID_ARGUMENT naming the type.
[[nodiscard]] absl::StatusOr<v1::DataFrameMeta> ParseFrameMeta(FrameType type, const uint8_t* bytes,
                                                               size_t size);

// A whole frame held in memory (tests, the fuzzer).
struct ParsedFrame {
  FrameHeader header;
  v1::DataFrameMeta meta;
  absl::Span<const uint8_t> payload;  // points into the parsed bytes
  size_t size = 0;                    // bytes the frame took
};

// Parses the frame at the start of `bytes`. Errors: those of
// ParseFrameHeader and ParseFrameMeta, INVALID_ARGUMENT "truncated frame"
// when `bytes` ends before the frame does.
[[nodiscard]] absl::StatusOr<ParsedFrame> ParseFrame(absl::Span<const uint8_t> bytes);

// Header and meta bytes of a frame whose payload is `payload_len` bytes.
std::string EncodeFrameStart(FrameType type, const v1::DataFrameMeta& meta, uint64_t payload_len);

// A chunk whose fields are `fields` (its data ignored) and whose data is
// the `size` bytes at `data`.
ChunkView FrameChunkView(const v1::Chunk& fields, const void* data, size_t size);

}  // namespace zerostate
