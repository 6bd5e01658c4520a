// Vectorised conversion between fp32 and the wire dtypes (bf16, fp16), and
// the gradient fold (dst += src). Rounding is round-to-nearest-even with
// IEEE denormals for both bf16 and fp16 (no flush to zero), NaN stays NaN
// (quiet). Every ISA variant gives bit-identical results.
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/cpu_features.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

// Scalar conversions, the definition the vector paths must match.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

// dst[i] = convert(src[i]) for n elements. `src`/`dst` are raw little-endian
// elements of `dtype`; FP32 is a plain copy. REQUIRES: dtype is FP32, BF16 or FP16.
void EncodeFloats(const float* src, size_t n, v1::DType dtype, void* dst);
void DecodeFloats(const void* src, size_t n, v1::DType dtype, float* dst);

// DecodeFloats with non-temporal stores, which skip the cache and the read
// of dst's lines before writing them: for large outputs nobody reads soon
// (the first node's gradient becoming a block's sum). Slower for small or
// cache-resident outputs.
void DecodeFloatsStreaming(const void* src, size_t n, v1::DType dtype, float* dst);

// dst[i] += decode(src[i]) in fp32.
void AccumulateFloats(const void* src, size_t n, v1::DType dtype, float* dst);

// The same with an explicit ISA, for tests and benchmarks.
// REQUIRES: isa is supported by this CPU.
void EncodeFloats(Isa isa, const float* src, size_t n, v1::DType dtype, void* dst);
void DecodeFloats(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst);
void DecodeFloatsStreaming(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst);
void AccumulateFloats(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst);

}  // namespace zerostate
