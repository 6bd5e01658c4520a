// Lengths of the string fields a client sends, checked before anything
// else looks at them: a 100 MB job id, path or tensor name otherwise
// costs the server its copies, and an error that echoes it is a status too
// large to deliver (the call then hangs until its deadline).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zerostate {

inline constexpr size_t kMaxJobIdBytes = 128;
inline constexpr size_t kMaxPathBytes = 4096;      // PATH_MAX: checkpoint roots, restore paths
inline constexpr size_t kMaxNameBytes = 1024;      // tensor and group names
inline constexpr size_t kMaxAddressBytes = 1024;   // server addresses in a job's list

// INVALID_ARGUMENT "FIELD: N bytes, more than MAX" when `value` is longer
// than `max`; never echoes the value.
[[nodiscard]] absl::Status CheckLength(absl::string_view field, absl::string_view value,
                                       size_t max);

}  // namespace zerostate
