// Seeded weight initialization: the value of every element is a pure
// function of (seed, tensor index, element index), so the same job gives the
// same initial weights on any number of servers, and a reference loop in one
// process can reproduce them.
#pragma once

#include <cstdint>

#include "common/job_spec.h"
#include "common/shard_map.h"

namespace zerostate {

// Writes the initial value of flat elements [elems.begin, elems.end) into
// out[0 .. elems.size()). Padding elements get 0.
// REQUIRES: elems.end <= layout.total_elems.
void FillInitialWeights(const Layout& layout, uint64_t seed, Range elems, float* out);

}  // namespace zerostate
