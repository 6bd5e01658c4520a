// A block's state from one moment format into another (a restore into a
// job of another format, an export of fp32 moments), with the step's own
// arithmetic (moment_codec.h), so an int8 state converted to int8 is the
// same bits and bf16 to fp32 is exact.
#pragma once

#include "server/core/optimizer/state_layout.h"

namespace zerostate::server {

// Copies the master weights of `from` (laid out by `from_layout`) into `to`
// (`to_layout`) and rewrites each moment: decoded to fp32 per quantization
// block, encoded in to_layout.format. Padding parts of `to` are zeroed.
// REQUIRES: the layouts agree on block_elems and moments; from != to.
void ConvertState(const StateLayout& from_layout, const float* from, const StateLayout& to_layout,
                  float* to);

}  // namespace zerostate::server
