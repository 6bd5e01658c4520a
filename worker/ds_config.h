// Maps a DeepSpeed-style ds_config.json onto a WorkerConfig.
//
// The JSON is read by protobuf's JSON parser into v1::DeepSpeedConfig, whose
// field names are DeepSpeed's keys. Before that, every key is checked
// against that message: a key zerostate does not know is an error naming
// its path ("fp16.foo"), except keys known to be harmless (logging,
// profiling, communication tuning that the service does its own way), which
// become warnings. Values zerostate cannot honour (ZeRO stage 3, parameter
// offload, an unknown optimizer or scheduler) are errors naming the key.
// Thread-safe: pure function.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/config.h"

namespace zerostate::worker {

// Errors: INVALID_ARGUMENT naming the key.
[[nodiscard]] absl::StatusOr<LoadedConfig> ParseDeepSpeedConfig(const std::string& json);

}  // namespace zerostate::worker
