// A Chunk message (proto/zerostate/v1/state_service.proto) as the server's
// core and the client read it: its fields, and where its payload lies in
// memory someone else owns (received gRPC slices, a data plane frame
// buffer, a shared memory segment). No gRPC here: the gRPC codec is
// common/chunk_wire.h, the data plane's frames common/frame.h.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

// Every field of a Chunk but `data`.
struct ChunkFields {
  std::string job_id;
  uint64_t step = 0;
  uint32_t node = 0;
  uint64_t block = 0;
  uint32_t offset = 0;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  uint64_t version = 0;
  uint32_t elems = 0;  // DTYPE_INT8 only: the element count (Chunk.elems)
};

// Where a Chunk's data lies: in received gRPC slices, a frame buffer or a
// shared memory segment.
struct ChunkView {
  ChunkFields fields;
  struct Segment {
    const uint8_t* data;
    size_t size;
  };
  std::vector<Segment> data;  // in order; together data_bytes long
  size_t data_bytes = 0;
  // Set when the sender keeps `data` unchanged until the chunk's step is
  // applied (a same-host client's shared buffer, DataFrameMeta.held): it
  // keeps the memory mapped, and a receiver may keep pointing at it.
  std::shared_ptr<const void> held;
};

// A view of a parsed message's fields and data (which must outlive it).
ChunkView ViewOf(const v1::Chunk& chunk);

// Calls fn(p, first, n) for consecutive runs of whole `esize`-byte elements
// of `data`: p holds elements [first, first + n) of the payload. An element
// that straddles two segments is assembled in a small buffer and passed as
// a run of one. A trailing partial element is ignored.
void ForEachElementRun(absl::Span<const ChunkView::Segment> data, size_t esize,
                       absl::FunctionRef<void(const void* p, size_t first, size_t n)> fn);

// Writes the view's data, elements of `wire`, into `out` as elements of
// `out_dtype`: a copy when they are equal, else a decode to fp32.
// REQUIRES: data_bytes is a multiple of DTypeSize(wire); out_dtype is wire
// or FP32; out has room for data_bytes / DTypeSize(wire) elements.
void CopyChunkData(const ChunkView& view, v1::DType wire, v1::DType out_dtype, void* out);

}  // namespace zerostate
