// The Chunk message (proto/zerostate/v1/state_service.proto) written and
// read in protobuf wire format straight from and into the caller's memory:
// a push sends a small header slice followed by the payload as its own
// grpc::Slice (no protobuf `bytes` copy), and a gather decodes the payload
// from the received slices directly into the output buffer.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::client {

namespace v1 = ::zerostate::v1;

// Every field of a Chunk but `data`.
struct ChunkFields {
  std::string job_id;
  uint64_t step = 0;
  uint32_t node = 0;
  uint64_t block = 0;
  uint32_t offset = 0;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  uint64_t version = 0;
};

// A serialized Chunk: `fields` followed by `payload` (data_bytes long) as
// the data field. The payload slice is referenced, not copied.
grpc::ByteBuffer MakeChunkBuffer(const ChunkFields& fields, grpc::Slice payload);

// Where a parsed Chunk's data lies in the received slices.
struct ChunkView {
  ChunkFields fields;
  struct Segment {
    const uint8_t* data;
    size_t size;
  };
  std::vector<Segment> data;  // in order; together data_bytes long
  size_t data_bytes = 0;
};

// Parses a serialized Chunk spread over `slices` (which must outlive the
// view). Unknown fields are skipped. Errors: DATA_LOSS naming what is malformed.
absl::StatusOr<ChunkView> ParseChunk(const std::vector<grpc::Slice>& slices);

// Writes the view's data, elements of `wire`, into `out` as elements of
// `out_dtype`: a copy when they are equal, else a decode to fp32.
// REQUIRES: data_bytes is a multiple of DTypeSize(wire); out_dtype is wire
// or FP32; out has room for data_bytes / DTypeSize(wire) elements.
void CopyChunkData(const ChunkView& view, v1::DType wire, v1::DType out_dtype, void* out);

}  // namespace zerostate::client
