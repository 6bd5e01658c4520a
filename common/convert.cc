// Scalar reference conversions. The vectorised variants live in
// convert_avx2.cc and convert_avx512.cc and must match these bit for bit.
#include "common/convert.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/convert_kernels.h"
#include "common/int8_wire.h"
#include "common/simd_scalar.h"

namespace zerostate {

using convert_internal::ConvertKernels;

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// Widening is exact; a NaN keeps its payload bits (the usual definition).
float Bf16ToFloat(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to Inf
  if (abs < 0x38800000u) {
    // The result is subnormal or zero; below half the smallest it is zero.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24 bits to drop past the 10-bit field
    uint32_t res = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (res & 1u))) ++res;
    return static_cast<uint16_t>(sign | res);
  }
  uint32_t res = abs - 0x38000000u;  // rebias exponent 127 -> 15
  res += 0xfffu + ((res >> 13) & 1u);
  return static_cast<uint16_t>(sign | (res >> 13));
}

float Fp16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0x1f) {  // Inf, or NaN: quieted as IEEE 754 (and F16C) convert it
    x = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  } else if (exp != 0) {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    x = sign | ((112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace convert_internal {

const ConvertKernels& ScalarConvertKernels() {
  static constexpr ConvertKernels kKernels = MakeConvertKernels<simd::ScalarOps>();
  return kKernels;
}

}  // namespace convert_internal

namespace {

const ConvertKernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return convert_internal::Avx512ConvertKernels();
    case Isa::kAvx2:
      return convert_internal::Avx2ConvertKernels();
    default:
      return convert_internal::ScalarConvertKernels();
  }
}

}  // namespace

void EncodeFloats(Isa isa, const float* src, size_t n, v1::DType dtype, void* dst) {
  auto* out = static_cast<uint16_t*>(dst);
  switch (dtype) {
    case v1::DTYPE_BF16:
      return KernelsFor(isa).encode_bf16(src, n, out);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).encode_fp16(src, n, out);
    default:
      std::memcpy(dst, src, n * 4);
  }
}

void DecodeFloats(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case v1::DTYPE_INT8:
      return DecodeInt8(isa, *static_cast<const Int8Run*>(src), n, dst);
    case v1::DTYPE_BF16:
      return KernelsFor(isa).decode_bf16(in, n, dst);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).decode_fp16(in, n, dst);
    default:
      std::memcpy(dst, src, n * 4);
  }
}

void DecodeFloatsStreaming(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case v1::DTYPE_INT8:
      return DecodeInt8Streaming(isa, *static_cast<const Int8Run*>(src), n, dst);
    case v1::DTYPE_BF16:
      return KernelsFor(isa).stream_bf16(in, n, dst);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).stream_fp16(in, n, dst);
    default:
      return KernelsFor(isa).stream_fp32(static_cast<const float*>(src), n, dst);
  }
}

void AccumulateFloats(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case v1::DTYPE_INT8:
      return AccumulateInt8(isa, *static_cast<const Int8Run*>(src), n, dst);
    case v1::DTYPE_BF16:
      return KernelsFor(isa).accumulate_bf16(in, n, dst);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).accumulate_fp16(in, n, dst);
    default:
      return KernelsFor(isa).accumulate_fp32(static_cast<const float*>(src), n, dst);
  }
}

void DecodeFloatsSquared(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst,
                         SquareLanes* lanes) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case v1::DTYPE_INT8:
      return DecodeInt8Squared(isa, *static_cast<const Int8Run*>(src), n, dst, lanes);
    case v1::DTYPE_BF16:
      return KernelsFor(isa).decode_bf16_squared(in, n, dst, lanes);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).decode_fp16_squared(in, n, dst, lanes);
    default:
      return KernelsFor(isa).decode_fp32_squared(static_cast<const float*>(src), n, dst, lanes);
  }
}

void DecodeFloatsStreamingSquared(Isa isa, const void* src, size_t n, v1::DType dtype,
                                  float* dst, SquareLanes* lanes) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case v1::DTYPE_INT8:
      return DecodeInt8StreamingSquared(isa, *static_cast<const Int8Run*>(src), n, dst, lanes);
    case v1::DTYPE_BF16:
      return KernelsFor(isa).stream_bf16_squared(in, n, dst, lanes);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).stream_fp16_squared(in, n, dst, lanes);
    default:
      return KernelsFor(isa).stream_fp32_squared(static_cast<const float*>(src), n, dst, lanes);
  }
}

void AccumulateFloatsSquared(Isa isa, const void* src, size_t n, v1::DType dtype, float* dst,
                             SquareLanes* lanes) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case v1::DTYPE_INT8:
      return AccumulateInt8Squared(isa, *static_cast<const Int8Run*>(src), n, dst, lanes);
    case v1::DTYPE_BF16:
      return KernelsFor(isa).accumulate_bf16_squared(in, n, dst, lanes);
    case v1::DTYPE_FP16:
      return KernelsFor(isa).accumulate_fp16_squared(in, n, dst, lanes);
    default:
      return KernelsFor(isa).accumulate_fp32_squared(static_cast<const float*>(src), n, dst,
                                                     lanes);
  }
}

void EncodeFloats(const float* src, size_t n, v1::DType dtype, void* dst) {
  EncodeFloats(BestIsa(), src, n, dtype, dst);
}
void DecodeFloats(const void* src, size_t n, v1::DType dtype, float* dst) {
  DecodeFloats(BestIsa(), src, n, dtype, dst);
}
void CopyStreaming(const void* src, size_t bytes, void* dst) {
#if defined(__SSE2__)
  // SSE2's 16-byte non-temporal stores fill whole lines in the
  // write-combining buffers, as wider ones do; every x86-64 has them.
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const size_t misaligned = reinterpret_cast<uintptr_t>(out) % 16;
  const size_t head = std::min(bytes, misaligned == 0 ? 0 : 16 - misaligned);
  std::memcpy(out, in, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 48), d);
  }
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
  }
  std::memcpy(out + i, in + i, bytes - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

void DecodeFloatsStreaming(const void* src, size_t n, v1::DType dtype, float* dst) {
  DecodeFloatsStreaming(BestIsa(), src, n, dtype, dst);
}
void AccumulateFloats(const void* src, size_t n, v1::DType dtype, float* dst) {
  AccumulateFloats(BestIsa(), src, n, dtype, dst);
}
void DecodeFloatsSquared(const void* src, size_t n, v1::DType dtype, float* dst,
                         SquareLanes* lanes) {
  DecodeFloatsSquared(BestIsa(), src, n, dtype, dst, lanes);
}
void DecodeFloatsStreamingSquared(const void* src, size_t n, v1::DType dtype, float* dst,
                                  SquareLanes* lanes) {
  DecodeFloatsStreamingSquared(BestIsa(), src, n, dtype, dst, lanes);
}
void AccumulateFloatsSquared(const void* src, size_t n, v1::DType dtype, float* dst,
                             SquareLanes* lanes) {
  AccumulateFloatsSquared(BestIsa(), src, n, dtype, dst, lanes);
}

}  // namespace zerostate
