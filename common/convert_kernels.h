// Internal to common/convert*.cc: the conversion loops, written once as
// templates over the vector traits of common/simd_*.h and instantiated once
// per ISA (convert.cc: scalar, convert_avx2.cc, convert_avx512.cc).
// Include only what the ISA files may include (see common/simd_avx2.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>

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
// through MapChunks. Fences before it returns. REQUIRES: out is 4-byte aligned.
template <class Ops, class In, class Convert>
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
  Ops::Fence();
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
  };
}

}  // namespace zerostate::convert_internal
