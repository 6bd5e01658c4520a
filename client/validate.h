// Argument checks that run before anything is sent. Every error is
// INVALID_ARGUMENT and names the argument, e.g. "node: 4 is out of range
// [0, 4)". Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "client/client.h"
#include "common/job_spec.h"
#include "common/shard_map.h"

namespace zerostate::client {

// Checks every option Client::Connect depends on.
[[nodiscard]] absl::Status ValidateOptions(const ClientOptions& options);

// `elems` must be ordered and inside the layout's (padded) flat space.
[[nodiscard]] absl::Status ValidateRange(const Layout& layout, Range elems);

// Arguments of JobClient::Push: node in [0, num_nodes), range inside the
// layout, data non-null unless the range is empty, dtype FP32 or grad_dtype.
[[nodiscard]] absl::Status ValidatePush(const v1::JobSpec& spec, const Layout& layout,
                                        uint32_t node, Range elems, const void* data,
                                        v1::DType dtype);

// Arguments of JobClient::Gather: range inside the layout, out non-null
// unless the range is empty, dtype FP32 or the job's weight_dtype.
[[nodiscard]] absl::Status ValidateGather(const v1::JobSpec& spec, const Layout& layout,
                                          Range elems, const void* out, v1::DType dtype);

}  // namespace zerostate::client
