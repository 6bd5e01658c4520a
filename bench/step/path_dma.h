// The GPU's side of path_floor_bench: two pinned host buffers (the
// gradient staging the GPU writes, the gather staging it reads) and two
// device buffers, and the copies between them on their own streams, as the
// trainer's device copies use the host's memory. Built with CUDA
// (path_dma_cuda.cc) or without (path_dma_none.cc: Create says so).
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerostate::bench {

class DmaStaging {
 public:
  // `bytes` in each buffer. Unavailable without a GPU or without CUDA in
  // the build, ResourceExhausted when an allocation fails.
  static absl::StatusOr<std::unique_ptr<DmaStaging>> Create(size_t bytes);
  virtual ~DmaStaging() = default;

  virtual void* grad_staging() = 0;   // pinned: d2h's destination
  virtual void* gather_staging() = 0; // pinned: h2d's source
  // `bytes` from `offset` of the buffers, returned once done (the calling
  // thread sleeps). REQUIRES: offset + bytes <= the buffers' size.
  virtual absl::Status CopyD2h(size_t offset, size_t bytes) = 0;
  virtual absl::Status CopyH2d(size_t offset, size_t bytes) = 0;
};

}  // namespace zerostate::bench
