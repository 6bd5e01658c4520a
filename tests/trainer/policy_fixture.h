// The fixed sequence of gradient statistics and the decisions every driver
// of the step policy must give for it (testdata/fp16_hysteresis2.json),
// for the C++ tests of the trainer and of the worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/step_policy.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::trainer {

struct PolicySequence {
  v1::TrainConfig train;  // as written: not normalized
  double average_over = 1;
  std::vector<uint64_t> restore_after;  // steps after which the state is moved
  struct Step {
    double sum_squares = 0;
    uint64_t nonfinite = 0;
    StepDecision expect;
    std::string why;
  };
  std::vector<Step> steps;
};

// Reads the fixture; fails the calling test (ADD_FAILURE) and returns an
// empty sequence if it cannot.
PolicySequence LoadPolicySequence();

// Expects `got` to equal step `step`'s `want`: skip and the next loss scale
// exactly, grad_norm and clip_factor within 1e-12 relative, grad_scale and
// lr (floats) within 1e-6 relative. Each mismatch names the step and its why.
void ExpectDecision(const PolicySequence::Step& want, size_t step, const StepDecision& got);

}  // namespace zerostate::trainer
