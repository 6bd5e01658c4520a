// ComputeGradStats: the kernel sums into 16 double lanes; the lanes are
// folded here, pairwise, the same way for every ISA.
#include <algorithm>

#include "server/core/optimizer/dispatch.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {

void AddGradSquares(Isa isa, const float* g, size_t n, SquareLanes* lanes) {
  kernels::KernelsFor(isa).grad_stats(g, n, lanes);
}

void AddGradSquares(const float* g, size_t n, SquareLanes* lanes) {
  AddGradSquares(BestIsa(), g, n, lanes);
}

GradStats FoldGradStats(const SquareLanes& lanes) {
  double l[16];
  std::copy(lanes.lane, lanes.lane + 16, l);
  for (int width = 8; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) l[k] += l[k + width];
  }
  return {l[0], lanes.nonfinite};
}

GradStats ComputeGradStats(Isa isa, const float* g, size_t n) {
  SquareLanes lanes;
  AddGradSquares(isa, g, n, &lanes);
  return FoldGradStats(lanes);
}

GradStats ComputeGradStats(const float* g, size_t n) { return ComputeGradStats(BestIsa(), g, n); }

}  // namespace zerostate::server
