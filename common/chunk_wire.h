// The Chunk message (proto/zerostate/v1/state_service.proto) written and
// read in protobuf wire format straight from and into the caller's memory,
// by the client and the server alike: a sender writes a small header slice
// followed by the payload as its own grpc::Slice (no protobuf `bytes`
// copy), and a receiver reads the payload where it lies in the received
// slices (ChunkView) and decodes, copies or folds it from there.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chunk_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

// A serialized Chunk: `fields` followed by `payload` (data_bytes long) as
// the data field. The payload slice is referenced, not copied.
grpc::ByteBuffer MakeChunkBuffer(const ChunkFields& fields, grpc::Slice payload);

// Parses a serialized Chunk spread over `slices` (which must outlive the
// view). Unknown fields are skipped; a field given twice keeps its last
// value, as protobuf does. Errors: DATA_LOSS "malformed Chunk: <what>".
[[nodiscard]] absl::StatusOr<ChunkView> ParseChunk(const std::vector<grpc::Slice>& slices);

}  // namespace zerostate
