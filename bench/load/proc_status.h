// Memory figures of a running process from /proc/<pid>/status.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zerostate::bench {

// The value of field `field` ("VmHWM", "VmRSS", ...) of /proc/<pid>/status,
// in bytes. Errors: NOT_FOUND (no such process or field), INTERNAL (a value
// that is not "<n> kB").
absl::StatusOr<uint64_t> ProcStatusBytes(pid_t pid, const std::string& field);

}  // namespace zerostate::bench
