// Internal to common/convert*.cc: the conversion loops, written once as
// templates over the vector traits of common/simd_*.h and instantiated once
// per ISA (convert.cc: scalar, convert_avx2.cc, convert_avx512.cc).
// Include only what the ISA files may include (see common/simd_avx2.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>

#include "common/square_lanes.h"

namespace zerostate::convert_internal {

// One ISA's conversion loops over n elements; fp32 <-> fp32 copies need none.
struct ConvertKernels {
  void (*encode_bf16)(const float* src, size_t n, uint16_t* dst);
  void (*encode_fp16)(const float* src, size_t n, uint16_t* dst);
  void (*decode_bf16)(const uint16_t* src, size_t n, float* dst);
  void (*decode_fp16)(const uint16_t* src, size_t n, float* dst);
  void (*accumulate_fp32)(const float* src, size_t n, float* dst);
  void (*accumulate_bf16)(const uint16_t* src, size_t n, float* dst);
  void (*accumulate_fp16)(const uint16_t* src, size_t n, float* dst);
  // The decodes (and the fp32 copy) again, with non-temporal stores.
  void (*stream_fp32)(const float* src, size_t n, float* dst);
  void (*stream_bf16)(const uint16_t* src, size_t n, float* dst);
  void (*stream_fp16)(const uint16_t* src, size_t n, float* dst);
  // The decodes, the fp32 copy, their streaming forms and the folds again,
  // continuing `lanes` over what they write (SquaredChunks).
  void (*decode_fp32_squared)(const float* src, size_t n, float* dst, SquareLanes* lanes);
  void (*decode_bf16_squared)(const uint16_t* src, size_t n, float* dst, SquareLanes* lanes);
  void (*decode_fp16_squared)(const uint16_t* src, size_t n, float* dst, SquareLanes* lanes);
  void (*stream_fp32_squared)(const float* src, size_t n, float* dst, SquareLanes* lanes);
  void (*stream_bf16_squared)(const uint16_t* src, size_t n, float* dst, SquareLanes* lanes);
  void (*stream_fp16_squared)(const uint16_t* src, size_t n, float* dst, SquareLanes* lanes);
  void (*accumulate_fp32_squared)(const float* src, size_t n, float* dst, SquareLanes* lanes);
  void (*accumulate_bf16_squared)(const uint16_t* src, size_t n, float* dst, SquareLanes* lanes);
  void (*accumulate_fp16_squared)(const uint16_t* src, size_t n, float* dst, SquareLanes* lanes);
};

// Defined in convert.cc, convert_avx2.cc and convert_avx512.cc.
// REQUIRES (to call what they return): the CPU supports the ISA.
const ConvertKernels& ScalarConvertKernels();
const ConvertKernels& Avx2ConvertKernels();
const ConvertKernels& Avx512ConvertKernels();

// Runs chunk(in + i, out + i) on every whole group of W elements, then once
// on a zero-padded copy of the last partial group, so the tail takes the
// same vector path (and rounding) as the body. `out` is read and written.
template <size_t W, class In, class Out, class Chunk>
void MapChunks(const In* in, Out* out, size_t n, Chunk chunk) {
  size_t i = 0;
  for (; i + W <= n; i += W) chunk(in + i, out + i);
  if (i == n) return;
  In tin[W] = {};
  Out tout[W] = {};
  std::memcpy(tin, in + i, (n - i) * sizeof(In));
  std::memcpy(tout, out + i, (n - i) * sizeof(Out));
  chunk(tin, tout);
  std::memcpy(out + i, tout, (n - i) * sizeof(Out));
}

// out[i] = convert(in + i) for n elements, where convert(in + i) gives the
// vector of elements i.., writing the groups whose output is vector-aligned
// with non-temporal stores (past the cache, no read for ownership), the rest
// through MapChunks. Fences before it returns (kFence; else the caller
// fences once after its last call). REQUIRES: out is 4-byte aligned.
template <class Ops, class In, class Convert, bool kFence = true>
void StreamChunks(const In* in, float* out, size_t n, Convert convert) {
  constexpr size_t W = Ops::kWidth;
  constexpr size_t kAlign = sizeof(typename Ops::F);
  auto store = [convert](const In* a, float* b) { Ops::Store(b, convert(a)); };
  const size_t misaligned = reinterpret_cast<uintptr_t>(out) % kAlign;
  const size_t head = std::min(n, misaligned == 0 ? 0 : (kAlign - misaligned) / sizeof(float));
  MapChunks<W>(in, out, head, store);
  size_t i = head;
  for (; i + W <= n; i += W) Ops::Stream(out + i, convert(in + i));
  MapChunks<W>(in + i, out + i, n - i, store);
  if (kFence) Ops::Fence();
}

// Adds the squares of g[0, n) to `sums` as the elements of lanes
// [lane, lane + n) of one group of 16, zero elsewhere (which adds nothing,
// see common/square_lanes.h); returns how many were not finite.
// REQUIRES: lane + n <= 16.
template <class Ops>
unsigned SquarePartialGroup(typename Ops::SquareSums* sums, const float* g, size_t lane,
                            size_t n) {
  if (n == 0) return 0;
  alignas(64) float group[16] = {};
  std::memcpy(group + lane, g, n * sizeof(float));
  return Ops::AddSquares16(sums, group);
}

// out[i] = value(in + i, out + i) (the vector of elements i.., kWidth at a
// time) for n elements, continuing `lanes` over what it writes. The whole
// groups of 16 of the buffer are squared from registers as they are
// written, by Ops::AddSquares16 (from a copy in L1, not from `out`), the
// very step of the statistics kernel; the partial groups at both ends are
// written through the cache, then squared. kStream: writes the whole
// groups with non-temporal stores where out is vector-aligned, and fences
// (kFence; else the caller fences once after its last call).
// Elementwise, so out gets the bits of the plain kernels' loops.
template <class Ops, bool kStream, class In, class Value, bool kFence = kStream>
void SquaredChunks(const In* in, float* out, size_t n, SquareLanes* lanes, Value value) {
  constexpr size_t W = Ops::kWidth;
  static_assert(16 % W == 0);
  using F = typename Ops::F;
  const auto chunk = [value](const In* a, float* b) { Ops::Store(b, value(a, b)); };
  typename Ops::SquareSums sums = Ops::LoadSquares(lanes->lane);
  const size_t lane = lanes->elems % 16;
  uint64_t nonfinite = 0;
  size_t i = lane == 0 ? 0 : std::min(n, 16 - lane);
  MapChunks<W>(in, out, i, chunk);
  nonfinite += SquarePartialGroup<Ops>(&sums, out, lane, i);
  const bool stream = kStream && reinterpret_cast<uintptr_t>(out + i) % sizeof(F) == 0;
  for (; i + 16 <= n; i += 16) {
    alignas(64) float group[16];
    for (size_t j = 0; j < 16; j += W) {
      const F v = value(in + i + j, out + i + j);
      if (stream) {
        Ops::Stream(out + i + j, v);
      } else {
        Ops::Store(out + i + j, v);
      }
      Ops::Store(group + j, v);
    }
    nonfinite += Ops::AddSquares16(&sums, group);
  }
  MapChunks<W>(in + i, out + i, n - i, chunk);
  nonfinite += SquarePartialGroup<Ops>(&sums, out + i, 0, n - i);
  Ops::SpillSquares(sums, lanes->lane);
  lanes->nonfinite += nonfinite;
  lanes->elems += n;
  if (kFence) Ops::Fence();
}

template <class Ops>
constexpr ConvertKernels MakeConvertKernels() {
  constexpr size_t W = Ops::kWidth;
  return {
      [](const float* s, size_t n, uint16_t* d) {
        MapChunks<W>(s, d, n, [](const float* a, uint16_t* b) {
          Ops::StoreHalf(b, Ops::ToBf16(Ops::Load(a)));
        });
      },
      [](const float* s, size_t n, uint16_t* d) {
        MapChunks<W>(s, d, n, [](const float* a, uint16_t* b) {
          Ops::StoreHalf(b, Ops::ToFp16(Ops::Load(a)));
        });
      },
      [](const uint16_t* s, size_t n, float* d) {
        MapChunks<W>(s, d, n, [](const uint16_t* a, float* b) {
          Ops::Store(b, Ops::FromBf16(Ops::LoadHalf(a)));
        });
      },
      [](const uint16_t* s, size_t n, float* d) {
        MapChunks<W>(s, d, n, [](const uint16_t* a, float* b) {
          Ops::Store(b, Ops::FromFp16(Ops::LoadHalf(a)));
        });
      },
      [](const float* s, size_t n, float* d) {
        MapChunks<W>(s, d, n, [](const float* a, float* b) {
          Ops::Store(b, Ops::Add(Ops::Load(b), Ops::Load(a)));
        });
      },
      [](const uint16_t* s, size_t n, float* d) {
        MapChunks<W>(s, d, n, [](const uint16_t* a, float* b) {
          Ops::Store(b, Ops::Add(Ops::Load(b), Ops::FromBf16(Ops::LoadHalf(a))));
        });
      },
      [](const uint16_t* s, size_t n, float* d) {
        MapChunks<W>(s, d, n, [](const uint16_t* a, float* b) {
          Ops::Store(b, Ops::Add(Ops::Load(b), Ops::FromFp16(Ops::LoadHalf(a))));
        });
      },
      [](const float* s, size_t n, float* d) {
        StreamChunks<Ops>(s, d, n, [](const float* a) { return Ops::Load(a); });
      },
      [](const uint16_t* s, size_t n, float* d) {
        StreamChunks<Ops>(s, d, n, [](const uint16_t* a) { return Ops::FromBf16(Ops::LoadHalf(a)); });
      },
      [](const uint16_t* s, size_t n, float* d) {
        StreamChunks<Ops>(s, d, n, [](const uint16_t* a) { return Ops::FromFp16(Ops::LoadHalf(a)); });
      },
      [](const float* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(s, d, n, l, [](const float* a, const float*) { return Ops::Load(a); });
      },
      [](const uint16_t* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(s, d, n, l, [](const uint16_t* a, const float*) {
          return Ops::FromBf16(Ops::LoadHalf(a));
        });
      },
      [](const uint16_t* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(s, d, n, l, [](const uint16_t* a, const float*) {
          return Ops::FromFp16(Ops::LoadHalf(a));
        });
      },
      [](const float* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, true>(s, d, n, l, [](const float* a, const float*) { return Ops::Load(a); });
      },
      [](const uint16_t* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, true>(s, d, n, l, [](const uint16_t* a, const float*) {
          return Ops::FromBf16(Ops::LoadHalf(a));
        });
      },
      [](const uint16_t* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, true>(s, d, n, l, [](const uint16_t* a, const float*) {
          return Ops::FromFp16(Ops::LoadHalf(a));
        });
      },
      [](const float* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(s, d, n, l, [](const float* a, const float* b) {
          return Ops::Add(Ops::Load(b), Ops::Load(a));
        });
      },
      [](const uint16_t* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(s, d, n, l, [](const uint16_t* a, const float* b) {
          return Ops::Add(Ops::Load(b), Ops::FromBf16(Ops::LoadHalf(a)));
        });
      },
      [](const uint16_t* s, size_t n, float* d, SquareLanes* l) {
        SquaredChunks<Ops, false>(s, d, n, l, [](const uint16_t* a, const float* b) {
          return Ops::Add(Ops::Load(b), Ops::FromFp16(Ops::LoadHalf(a)));
        });
      },
  };
}

}  // namespace zerostate::convert_internal
