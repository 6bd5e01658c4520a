#include "common/read_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace zerostate {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  const int err = errno;
  const std::string what = absl::StrCat("cannot read '", path, "': ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(what);
  if (err == EACCES) return absl::PermissionDeniedError(what);
  return absl::InternalError(what);
}

}  // namespace zerostate
