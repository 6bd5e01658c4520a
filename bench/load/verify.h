// The exactly-once check of load_bench: after `steps` steps of TestGradient
// gradients (tests/client/reference_model.h) from every node at learning
// rate `lr`, a job's version must be `steps` and its weights, both the fp32
// masters and the low-precision copy Gather serves, must equal those of
// ReferenceModel bit for bit. A step applied twice, lost, or applied with a
// node's gradient missing or counted twice changes the bits.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "client/client.h"

namespace zerostate::bench {

// OK, or FAILED_PRECONDITION naming the version or the first differing
// element and how many differ; errors of the job's calls.
absl::Status VerifyExactlyOnce(client::JobClient& job, int steps, float lr);

}  // namespace zerostate::bench
