#include "common/int8_delta.h"

#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/job_spec.h"

namespace zerostate {

absl::Status EncodeInt8Delta(Isa isa, const void* target, v1::DType dtype, size_t n,
                             uint16_t* copy, uint8_t* out) {
  if (dtype != v1::DTYPE_FP32 && dtype != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: the target of an int8 delta is fp32 or bf16, not ", DTypeName(dtype)));
  }
  if (n == 0) return absl::InvalidArgumentError("n: an int8 delta of no elements");
  std::vector<float> diff(n);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t t = dtype == v1::DTYPE_FP32 ? FloatToBf16(static_cast<const float*>(target)[i])
                                               : static_cast<const uint16_t*>(target)[i];
    diff[i] = Bf16ToFloat(t) - Bf16ToFloat(copy[i]);
  }
  EncodeInt8(isa, diff.data(), v1::DTYPE_FP32, n, /*residual=*/nullptr, out);
  std::vector<float> scales(Int8Groups(n));
  for (size_t g = 0; g < scales.size(); ++g) scales[g] = Int8ScaleOf(out[g]);
  const Int8Run run{scales.data(), reinterpret_cast<const int8_t*>(out + scales.size()), 0};
  ApplyInt8Delta(run, n, copy);
  return absl::OkStatus();
}

absl::Status EncodeInt8Delta(const void* target, v1::DType dtype, size_t n, uint16_t* copy,
                             uint8_t* out) {
  return EncodeInt8Delta(BestIsa(), target, dtype, n, copy, out);
}

void ApplyInt8Delta(const Int8Run& run, size_t n, uint16_t* copy) {
  for (size_t i = 0; i < n; ++i) {
    const size_t at = run.phase + i;
    const int8_t q = run.codes[i];
    const float change = q == kInt8NonFinite ? std::numeric_limits<float>::quiet_NaN()
                                             : static_cast<float>(q) * run.scales[at / kInt8Group];
    copy[i] = FloatToBf16(Bf16ToFloat(copy[i]) + change);
  }
}

absl::Status ApplyInt8Delta(const Int8Chunk& chunk, size_t n, uint16_t* copy) {
  if (chunk.elems != n) {
    return absl::InvalidArgumentError(absl::StrCat("elems: the int8 delta holds ", chunk.elems,
                                                   " elements, the copy ", n));
  }
  ForEachInt8Run(chunk, [copy](const Int8Run& run, size_t first, size_t len) {
    ApplyInt8Delta(run, len, copy + first);
  });
  return absl::OkStatus();
}

}  // namespace zerostate
