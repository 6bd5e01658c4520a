// Maps a DeepSpeed-style ds_config.json onto a WorkerConfig.
//
// The JSON is read by protobuf's JSON parser into v1::DeepSpeedConfig, whose
// field names are DeepSpeed's keys. Before that, every key is checked
// against that message: a key zerostate does not know is an error naming
// its path ("fp16.foo"), except keys known to be harmless (logging,
// profiling, communication tuning that the service does its own way), which
// become warnings. Keys that only place memory (the `aio` block, parameter
// offload, ZeRO-3's partitioning knobs) are ignored with one warning each
// that names the server flags doing their job. Values that would change the
// training's math and that zerostate cannot honour (an unknown optimizer or
// scheduler, fp16 and bf16 together, ...) are errors naming the key.
// docs/ds_config.md lists every key and what becomes of it.
// Thread-safe: pure function.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/config.h"

namespace zerostate::worker {

// Errors: INVALID_ARGUMENT naming the key.
[[nodiscard]] absl::StatusOr<LoadedConfig> ParseDeepSpeedConfig(const std::string& json);

// "int8" or "plain" (WireConfig, the --gradient_wire / --weight_wire
// flags) as a WireFormat. Errors: INVALID_ARGUMENT naming `field`.
[[nodiscard]] absl::StatusOr<v1::WireFormat> ParseWire(absl::string_view field,
                                                       absl::string_view value);

// Moves config->wire (WireConfig) into train.gradient_wire / weight_wire
// and clears it. Errors: INVALID_ARGUMENT naming wire.gradients or
// wire.weights (a value but int8 or plain) or train.*_wire (unknown).
[[nodiscard]] absl::Status ApplyWireConfig(v1::WorkerConfig* config);

}  // namespace zerostate::worker
