// Vectorised conversion between fp32 and the wire dtypes (bf16, fp16), and
// the gradient fold (dst += src). Rounding is round-to-nearest-even with
// IEEE denormals for both bf16 and fp16 (no flush to zero), NaN stays NaN
// (quiet). Every ISA variant gives bit-identical results.
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/cpu_features.h"
#include "common/square_lanes.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

// Scalar conversions, the definition the vector paths must match.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

// dst[i] = convert(src[i]) for n elements. `src`/`dst` are raw little-endian
// elements of `dtype`; FP32 is a plain copy. REQUIRES: dtype is FP32, BF16 or FP16.
// The decodes below (DecodeFloats to AccumulateFloatsSquared) also take
// DTYPE_INT8, the compressed wire: then `src` points to an Int8Run
// (common/int8_wire.h), the codes and their scales.
void EncodeFloats(const float* src, size_t n, v1::DType dtype, void* dst);
void DecodeFloats(const void* src, size_t n, v1::DType dtype, float* dst);

// DecodeFloats with non-temporal stores, which skip the cache and the read
// of dst's lines before writing them: for large outputs nobody reads soon
// (the first node's gradient becoming a block's sum). Slower for small or
// cache-resident outputs.
void DecodeFloatsStreaming(const void* src, size_t n, v1::DType dtype, float* dst);

// memcpy(dst, src, bytes) with non-temporal stores where dst is 16-byte
// aligned: for copies into memory nobody on this host reads soon (a
// gradient landing before its step, a gather into a client's shared
// buffer that a device copies out of), which then skip the read of dst's
// lines before writing them. Fences before it returns.
void CopyStreaming(const void* src, size_t bytes, void* dst);

// dst[i] += decode(src[i]) in fp32.
void AccumulateFloats(const void* src, size_t n, v1::DType dtype, float* dst);

// DecodeFloats, DecodeFloatsStreaming and AccumulateFloats that also carry
// gradient statistics over what they write (common/square_lanes.h): dst's
// n elements are added to `lanes` as the elements that follow those it
// holds (dst[0] at buffer position lanes->elems), mostly squared from
// registers as they are written, without reading dst back. dst gets the
// same bits as with the plain forms. The streaming form streams the whole
// groups of 16 of the buffer where they are vector-aligned (as they are
// when the buffer's start is).
void DecodeFloatsSquared(const void* src, size_t n, v1::DType dtype, float* dst,
                         SquareLanes* lanes);
void DecodeFloatsStreamingSquared(const void* src, size_t n, v1::DType dtype, float* dst,
                                  SquareLanes* lanes);
void AccumulateFloatsSquared(const void* src, size_t n, v1::DType dtype, float* dst,
                             SquareLanes* lanes);

// The same with an explicit ISA, for tests and benchmarks.
// REQUIRES: isa is supported by this CPU.
void EncodeFloats(Isa isa, const float* src, size_t n, v1::DType dtype, void* dst);
void DecodeFloats(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst);
void DecodeFloatsStreaming(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst);
void AccumulateFloats(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst);
void DecodeFloatsSquared(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst,
                         SquareLanes* lanes);
void DecodeFloatsStreamingSquared(Isa isa, const void* src, size_t n, v1::DType dtype,
                                  float* dst, SquareLanes* lanes);
void AccumulateFloatsSquared(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst,
                             SquareLanes* lanes);

}  // namespace zerostate
