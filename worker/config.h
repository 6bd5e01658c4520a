// Loading and checking a worker's configuration (proto/zerostate/v1/config.proto).
//
// A config comes from protobuf text format (*.textproto, *.txtpb, *.pbtxt)
// or from a DeepSpeed-style ds_config.json (*.json, see worker/ds_config.h).
// NormalizeConfig then fills every default and checks every field against
// the world size, so the rest of the worker reads a complete, valid config.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::worker {

namespace v1 = ::zerostate::v1;

// A parsed config and the harmless things the parser chose to ignore
// (each warning names the key).
struct LoadedConfig {
  v1::WorkerConfig config;
  std::vector<std::string> warnings;
};

// Parses protobuf text format. Errors: INVALID_ARGUMENT naming the line,
// column and field (an unknown field is an error).
[[nodiscard]] absl::StatusOr<v1::WorkerConfig> ParseTextConfig(const std::string& text);

// Reads `path` and parses it by extension: ".json" as a DeepSpeed config,
// anything else as text format. Errors: NOT_FOUND (no such file), and the
// parsers' INVALID_ARGUMENT, prefixed with the path.
[[nodiscard]] absl::StatusOr<LoadedConfig> LoadConfigFile(const std::string& path);

// Fills defaults (see config.proto) and checks every field for a job of
// `world_size` ranks. Errors: INVALID_ARGUMENT naming the field, e.g.
// "train.micro_batch_size: must be >= 1".
[[nodiscard]] absl::StatusOr<v1::WorkerConfig> NormalizeConfig(const v1::WorkerConfig& config,
                                                               uint32_t world_size);

// The environment variable that carries the job's token to every worker.
inline constexpr char kJobTokenEnv[] = "ZEROSTATE_JOB_TOKEN";

// The job token the worker's clients send: `from_env` ($ZEROSTATE_JOB_TOKEN)
// when set; otherwise, when every one of the job's `world` ranks runs in this
// process (`ranks_here`), 256 fresh bits from /dev/urandom as 64 hex digits.
// Errors: INVALID_ARGUMENT naming the variable when ranks of other
// processes would need the token too; INTERNAL when /dev/urandom fails.
// The token never appears in a message.
[[nodiscard]] absl::StatusOr<std::string> WorkerJobToken(const std::string& from_env,
                                                         uint32_t world, uint32_t ranks_here);

// The namespace of every rendezvous of this run: "<job_id>@<run_id>".
// REQUIRES: config normalized.
std::string RendezvousScope(const v1::WorkerConfig& config);

}  // namespace zerostate::worker
