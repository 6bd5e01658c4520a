// The int8 wire: the scalar loops (the definition the vector ones match),
// the dispatch by ISA and group, and the reading of received chunks.
#include "common/int8_wire.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/int8_wire_kernels.h"
#include "common/job_spec.h"
#include "common/simd_scalar.h"

namespace zerostate {

using int8_internal::Int8Kernels;

namespace int8_internal {
namespace {

struct ScalarInt8Ops : simd::ScalarOps {
  using I = int32_t;
  static I LoadCodes(const int8_t* p) { return *p; }
  static void StoreCodes(int8_t* p, I q) { *p = static_cast<int8_t>(q); }
  static F FromCodes(I q, F scale) {
    return q == kInt8NonFinite ? std::numeric_limits<float>::quiet_NaN()
                               : static_cast<float>(q) * scale;
  }
  static uint32_t AbsBits(F v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b & 0x7fffffffu;
  }
  static bool Finite(F v) { return AbsBits(v) < 0x7f800000u; }
  static I FiniteAbsBits(F v) { return Finite(v) ? static_cast<I>(AbsBits(v)) : 0; }
  static I MaxI(I a, I b) { return std::max(a, b); }
  static uint32_t HMax(I a) { return static_cast<uint32_t>(a); }
  static I Codes(F v, F inv) {
    return Finite(v) ? static_cast<I>(std::nearbyint(v * inv)) : kInt8NonFinite;
  }
  static F ZeroNonFinite(F v) { return Finite(v) ? v : 0.0f; }
};

}  // namespace

const Int8Kernels& ScalarInt8Kernels() {
  static constexpr Int8Kernels kKernels = MakeInt8Kernels<ScalarInt8Ops>();
  return kKernels;
}

}  // namespace int8_internal

namespace {

static_assert(kInt8MinAbsmax == int8_internal::kMinAbsmax);
static_assert(kInt8Group == int8_internal::kGroup);
static_assert(kInt8Group == kTensorAlignElems);

const Int8Kernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return int8_internal::Avx512Int8Kernels();
    case Isa::kAvx2:
      return int8_internal::Avx2Int8Kernels();
    default:
      return int8_internal::ScalarInt8Kernels();
  }
}

}  // namespace

void EncodeInt8(Isa isa, const void* src, v1::DType dtype, size_t n, float* residual,
                uint8_t* out) {
  const Int8Kernels& k = KernelsFor(isa);
  switch (dtype) {
    case v1::DTYPE_BF16:
      return k.encode_bf16(static_cast<const uint16_t*>(src), n, residual, out);
    case v1::DTYPE_FP16:
      return k.encode_fp16(static_cast<const uint16_t*>(src), n, residual, out);
    default:
      return k.encode_fp32(static_cast<const float*>(src), n, residual, out);
  }
}

void EncodeInt8(const void* src, v1::DType dtype, size_t n, float* residual, uint8_t* out) {
  EncodeInt8(BestIsa(), src, dtype, n, residual, out);
}

void DecodeInt8(Isa isa, const Int8Run& run, size_t n, float* dst) {
  KernelsFor(isa).decode(run.codes, n, run.scales, run.phase, dst);
}
void DecodeInt8Streaming(Isa isa, const Int8Run& run, size_t n, float* dst) {
  KernelsFor(isa).stream(run.codes, n, run.scales, run.phase, dst);
}
void AccumulateInt8(Isa isa, const Int8Run& run, size_t n, float* dst) {
  KernelsFor(isa).accumulate(run.codes, n, run.scales, run.phase, dst);
}
void DecodeInt8Squared(Isa isa, const Int8Run& run, size_t n, float* dst, SquareLanes* lanes) {
  KernelsFor(isa).decode_squared(run.codes, n, run.scales, run.phase, dst, lanes);
}
void DecodeInt8StreamingSquared(Isa isa, const Int8Run& run, size_t n, float* dst,
                                SquareLanes* lanes) {
  KernelsFor(isa).stream_squared(run.codes, n, run.scales, run.phase, dst, lanes);
}
void AccumulateInt8Squared(Isa isa, const Int8Run& run, size_t n, float* dst,
                           SquareLanes* lanes) {
  KernelsFor(isa).accumulate_squared(run.codes, n, run.scales, run.phase, dst, lanes);
}

absl::Status CheckInt8ChunkLength(uint32_t elems, size_t bytes) {
  if (elems != 0 && bytes == Int8ChunkBytes(elems)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "data: an int8 chunk of ", elems, " elements (elems) is ", Int8ChunkBytes(elems),
      " bytes (", Int8Groups(elems), " one-byte scales, then the codes), not ", bytes));
}

absl::StatusOr<Int8Chunk> ReadInt8Chunk(const ChunkView& view, uint32_t elems) {
  if (absl::Status s = CheckInt8ChunkLength(elems, view.data_bytes); !s.ok()) return s;
  Int8Chunk chunk;
  chunk.elems = elems;
  chunk.scales.reserve(Int8Groups(elems));
  for (const ChunkView::Segment& s : view.data) {
    const size_t take = std::min(Int8Groups(elems) - chunk.scales.size(), s.size);
    for (size_t i = 0; i < take; ++i) {
      const uint8_t byte = s.data[i];
      if (byte == 255) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data: scale ", chunk.scales.size(), " of the int8 chunk is byte 255 (an infinite "
            "scale); a scale byte b is 2^(b - 127), 0 for 0, and below 255"));
      }
      chunk.scales.push_back(Int8ScaleOf(byte));
    }
    if (take < s.size) chunk.codes.push_back({s.data + take, s.size - take});
  }
  return chunk;
}

float Int8ScaleOf(uint8_t byte) { return int8_internal::PowerOfTwo(byte); }

void ForEachInt8Run(const Int8Chunk& chunk,
                    absl::FunctionRef<void(const Int8Run& run, size_t first, size_t n)> fn) {
  size_t first = 0;
  for (const ChunkView::Segment& s : chunk.codes) {
    const Int8Run run{chunk.scales.data() + first / kInt8Group,
                      reinterpret_cast<const int8_t*>(s.data),
                      static_cast<uint32_t>(first % kInt8Group)};
    fn(run, first, s.size);
    first += s.size;
  }
}

void DecodeInt8Chunk(const Int8Chunk& chunk, v1::DType out_dtype, void* out) {
  const Int8Kernels& k = KernelsFor(BestIsa());
  ForEachInt8Run(chunk, [&](const Int8Run& run, size_t first, size_t n) {
    if (out_dtype == v1::DTYPE_FP32) {
      k.decode(run.codes, n, run.scales, run.phase, static_cast<float*>(out) + first);
    } else {
      (out_dtype == v1::DTYPE_BF16 ? k.decode_bf16 : k.decode_fp16)(
          run.codes, n, run.scales, run.phase, static_cast<uint16_t*>(out) + first);
    }
  });
}

}  // namespace zerostate
