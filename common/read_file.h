// Reads a whole (small) file into memory: certificates, keys, configs.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace zerostate {

// The file's bytes. Errors: NOT_FOUND or PERMISSION_DENIED (or INTERNAL for
// other failures), "cannot read '<path>': <reason>".
[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace zerostate
