// Where this process sits in the job, from the launcher's environment
// variables (torchrun's names): RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, NODE_RANK. Missing variables mean a single rank.
// Thread-safe: pure function of its arguments.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine.h"

namespace zerostate::worker {

// Reads a variable; returns "" when unset.
using EnvFn = std::function<std::string(const std::string& name)>;

// The topology of this process's first local rank. With local_threads > 0
// the process runs local ranks 0 .. local_threads-1 of node NODE_RANK as
// threads: LOCAL_WORLD_SIZE defaults to local_threads and must equal it,
// LOCAL_RANK must be unset or 0. Errors: INVALID_ARGUMENT naming the
// variable (not a number, inconsistent with the others).
[[nodiscard]] absl::StatusOr<Topology> TopologyFromEnv(const EnvFn& env, uint32_t local_threads);

// The real environment (getenv).
std::string GetEnv(const std::string& name);

}  // namespace zerostate::worker
