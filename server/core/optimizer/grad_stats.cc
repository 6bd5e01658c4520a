// ComputeGradStats: the kernel sums into 16 double lanes; the lanes are
// folded here, pairwise, the same way for every ISA.
#include "server/core/optimizer/dispatch.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {

GradStats ComputeGradStats(Isa isa, const float* g, size_t n) {
  double lanes[16];
  GradStats stats;
  stats.nonfinite = kernels::KernelsFor(isa).grad_stats(g, n, lanes);
  for (int width = 8; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  stats.sum_squares = lanes[0];
  return stats;
}

GradStats ComputeGradStats(const float* g, size_t n) { return ComputeGradStats(BestIsa(), g, n); }

}  // namespace zerostate::server
