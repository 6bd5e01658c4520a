#include "common/chunk_view.h"

#include <algorithm>
#include <cstring>

#include "common/convert.h"
#include "common/job_spec.h"

namespace zerostate {

ChunkView ViewOf(const v1::Chunk& c) {
  ChunkView view;
  view.fields = {c.job_id(), c.step(),  c.node(),    c.block(),
                 c.offset(), c.dtype(), c.version(), c.elems()};
  view.data_bytes = c.data().size();
  if (!c.data().empty()) {
    view.data.push_back({reinterpret_cast<const uint8_t*>(c.data().data()), c.data().size()});
  }
  return view;
}

void ForEachElementRun(absl::Span<const ChunkView::Segment> data, size_t esize,
                       absl::FunctionRef<void(const void* p, size_t first, size_t n)> fn) {
  uint8_t carry[8];
  size_t carried = 0;
  size_t next = 0;  // the first element not yet passed to fn
  for (const auto& s : data) {
    const uint8_t* p = s.data;
    size_t left = s.size;
    if (carried > 0) {
      size_t take = std::min(esize - carried, left);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      left -= take;
      if (carried < esize) continue;
      fn(carry, next++, 1);
      carried = 0;
    }
    size_t n = left / esize;
    if (n > 0) fn(p, next, n);
    next += n;
    carried = left - n * esize;
    std::memcpy(carry, p + n * esize, carried);
  }
}

void CopyChunkData(const ChunkView& view, v1::DType wire, v1::DType out_dtype, void* out) {
  if (wire == out_dtype) {
    uint8_t* dst = static_cast<uint8_t*>(out);
    for (const auto& s : view.data) {
      std::memcpy(dst, s.data, s.size);
      dst += s.size;
    }
    return;
  }
  float* f = static_cast<float*>(out);
  ForEachElementRun(view.data, DTypeSize(wire), [&](const void* p, size_t first, size_t n) {
    DecodeFloats(p, n, wire, f + first);
  });
}

}  // namespace zerostate
