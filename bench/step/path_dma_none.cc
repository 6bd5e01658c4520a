// path_dma.h without CUDA in the build: no device copies.
#include "bench/step/path_dma.h"

namespace zerostate::bench {

absl::StatusOr<std::unique_ptr<DmaStaging>> DmaStaging::Create(size_t) {
  return absl::UnavailableError("built without CUDA: no device copies (d2h, h2d)");
}

}  // namespace zerostate::bench
