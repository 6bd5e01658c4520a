// CUDA, cuBLAS and NCCL results as absl::Status: every failure becomes
// INTERNAL naming the call and the library's own error text.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zerostate::worker::cuda {

[[nodiscard]] inline absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

[[nodiscard]] inline absl::Status Check(ncclResult_t e, const char* what) {
  if (e == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(e)));
}

[[nodiscard]] inline absl::Status Check(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusString(e)));
}

}  // namespace zerostate::worker::cuda

// Returns the Status of `expr` from the enclosing function if it failed.
#define ZS_CUDA_RETURN_IF_ERROR(expr)                                              \
  do {                                                                             \
    if (absl::Status zs_status = ::zerostate::worker::cuda::Check((expr), #expr); \
        !zs_status.ok())                                                           \
      return zs_status;                                                            \
  } while (0)
