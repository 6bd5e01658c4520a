// The running state of the gradient statistics over a prefix of a float
// buffer g, in the order ComputeGradStats (server/core/optimizer) fixes:
// lane[k] is the sum, in double, of g[i]^2 over the finite g[i] with
// i % 16 == k, added in order of i; nonfinite counts the other g[i]; elems
// is the prefix's length, so the next element goes to lane elems % 16.
//
// Any kernel that adds in that order may continue it, with bit-identical
// results: a lane is never below +0.0 (squares are >= +0.0), so the +0.0
// that a zero adds changes nothing, and partial groups of 16 can be added
// as whole ones, zero elsewhere (as ComputeGradStats pads its tail). For
// the same reason a run of zeros (the sum's layout padding) may be passed
// over without adding it: only elems moves.
// Include-only (no other headers): the ISA files include it.
#pragma once

#include <cstdint>

namespace zerostate {

struct SquareLanes {
  double lane[16] = {};
  uint64_t nonfinite = 0;
  uint64_t elems = 0;
};

}  // namespace zerostate
