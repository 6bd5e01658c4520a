// The compressed wire's DTYPE_INT8 chunks (state_service.proto, DType):
// n elements as ceil(n / kInt8Group) one-byte scales, then n int8 codes;
// element i is codes[i] * scale(bytes[i / kInt8Group]), groups counted
// from the chunk's first element, and the code kInt8NonFinite (-128)
// stands for a NaN or an infinity (decoded as NaN, so the overflow check
// still sees it). A scale byte b is the power of two whose fp32 exponent
// field is b: 2^(b - 127), and 0 for b = 0 (Int8ScaleOf: the float of bits
// b << 23; OCP's E8M0, as in MXINT8); b = 255 (infinity) is refused.
//
// Groups are 64 elements, the layout's tensor alignment (job_spec.h
// kTensorAlignElems): a chunk starting on a tensor's boundary never puts
// two tensors under one scale, so a LayerNorm gain of 1 never sets the
// quantum of the bias or the weights beside it. A one-byte scale per 64
// costs what an fp32 one per 256 did (1.016 bytes per element).
//
// The quantization of one group of v[0, len): amax = the largest |v[i]|
// over its finite elements. amax < kInt8MinAbsmax: scale byte 0, every
// finite code 0. Else the scale is the least power of two >= amax / 127
// (the quotient rounded once in fp32), inv its exact inverse;
// code[i] = round-half-even(v[i] * inv), in [-127, 127] (|v[i] * inv| <
// 127.5: the quotient is off by half an ulp at most). So
// |v[i] - code[i] * scale| <= scale / 2 < amax / 127 (or < kInt8MinAbsmax
// for a tiny group), and codes times scales are exact. Every ISA gives
// the same bits: the max is an integer max over the magnitudes' bits, the
// rest are single IEEE operations without fused multiply-add.
//
// Error feedback (the trainer's gradients): EncodeInt8 with a residual
// quantizes v = decode(src) + residual and leaves residual = v -
// dequantized (0 where v is not finite), so that over steps the sum of
// what is sent differs from the sum of the true gradients by the last
// residual alone: at most half a quantum per element.
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/chunk_view.h"
#include "common/cpu_features.h"
#include "common/square_lanes.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

inline constexpr uint32_t kInt8Group = 64;
inline constexpr int8_t kInt8NonFinite = -128;
// 2^-100: a group whose largest magnitude is below it is sent as zeros.
inline constexpr float kInt8MinAbsmax = 7.8886090522101181e-31f;

// Scales of a chunk of n elements, and its bytes (a byte per scale).
constexpr size_t Int8Groups(size_t n) { return (n + kInt8Group - 1) / kInt8Group; }
constexpr size_t Int8ChunkBytes(size_t n) { return Int8Groups(n) + n; }

// The scale a scale byte stands for: the float of bits byte << 23 (2^(b -
// 127); 0 for 0; infinity for 255, which ReadInt8Chunk refuses).
float Int8ScaleOf(uint8_t byte);

// Quantizes n elements of `src` (FP32, BF16 or FP16, little-endian) into
// the chunk `out` (Int8ChunkBytes(n) bytes), groups counted from src[0].
// `residual` (n floats, may be null): error feedback, see above; it must
// not overlap src or out.
void EncodeInt8(const void* src, v1::DType dtype, size_t n, float* residual, uint8_t* out);
void EncodeInt8(Isa isa, const void* src, v1::DType dtype, size_t n, float* residual,
                uint8_t* out);

// A run of codes and their scales: codes[i] has scale
// scales[(phase + i) / kInt8Group]. common/convert.h's DecodeFloats and
// its kin take DTYPE_INT8 with `src` pointing to one (the fold's input).
struct Int8Run {
  const float* scales;
  const int8_t* codes;
  uint32_t phase;  // codes[0]'s place in its group, < kInt8Group
  // The run from its element k on.
  Int8Run Skip(size_t k) const {
    const size_t at = phase + k;
    return {scales + at / kInt8Group, codes + k, static_cast<uint32_t>(at % kInt8Group)};
  }
};

// dst[i] = decode(run, i) for n elements, in the forms of common/convert.h
// (plain, streaming stores, fold dst +=, each also squaring what it writes
// into `lanes`). Bit-identical on every ISA.
void DecodeInt8(Isa isa, const Int8Run& run, size_t n, float* dst);
void DecodeInt8Streaming(Isa isa, const Int8Run& run, size_t n, float* dst);
void AccumulateInt8(Isa isa, const Int8Run& run, size_t n, float* dst);
void DecodeInt8Squared(Isa isa, const Int8Run& run, size_t n, float* dst, SquareLanes* lanes);
void DecodeInt8StreamingSquared(Isa isa, const Int8Run& run, size_t n, float* dst,
                                SquareLanes* lanes);
void AccumulateInt8Squared(Isa isa, const Int8Run& run, size_t n, float* dst,
                           SquareLanes* lanes);

// A received DTYPE_INT8 chunk, checked: its scales read out as floats (a
// float per 64 elements), its codes where they lie.
struct Int8Chunk {
  std::vector<float> scales;
  std::vector<ChunkView::Segment> codes;  // n bytes together
  size_t elems = 0;
};

// OK when `bytes` is the length of an int8 chunk of `elems` elements (not
// 0); else INVALID_ARGUMENT naming `data`, the length and the count.
[[nodiscard]] absl::Status CheckInt8ChunkLength(uint32_t elems, size_t bytes);

// Reads the chunk `view` of `elems` elements. Errors: INVALID_ARGUMENT
// naming `data` when its length is not Int8ChunkBytes(elems) (or elems is
// 0), naming the first scale byte of 255 (an infinite scale).
[[nodiscard]] absl::StatusOr<Int8Chunk> ReadInt8Chunk(const ChunkView& view, uint32_t elems);

// Calls fn(run, first, n) for consecutive runs of the chunk's codes:
// `run` holds elements [first, first + n).
void ForEachInt8Run(const Int8Chunk& chunk,
                    absl::FunctionRef<void(const Int8Run& run, size_t first, size_t n)> fn);

// Decodes a whole chunk into `out`, n elements of `out_dtype` (FP32,
// BF16 or FP16).
void DecodeInt8Chunk(const Int8Chunk& chunk, v1::DType out_dtype, void* out);

}  // namespace zerostate
