#include "common/field_limits.h"

#include "absl/strings/str_cat.h"

namespace zerostate {

absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", value.size(), " bytes, more than the ", max, " allowed"));
}

}  // namespace zerostate
