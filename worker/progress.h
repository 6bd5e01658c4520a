// The progress line zerostate-worker prints per step, e.g.
//   step 12 loss 0.08311 lr 0.003 scale 1 samples/s 5210 | compute 8.1ms
//   exchange 0.9ms push 2.2ms step 3.0ms gather 4.1ms | wire push 1.016
//   gather 1.016 B/param
// (the last part: payload bytes per parameter on the wire, by direction;
// docs/wire.md)
// Thread-safe: pure function.
#pragma once

#include <cstdint>
#include <string>

#include "worker/engine.h"

namespace zerostate::worker {

// `global_batch`: samples per step over all ranks.
std::string FormatProgress(const StepReport& report, uint64_t global_batch);

}  // namespace zerostate::worker
