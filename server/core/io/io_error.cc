#include "server/core/io/io_error.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerostate::server::io {

std::string ErrnoText(int err) {
  char buf[128];
  const char* text = strerror_r(err, buf, sizeof(buf));  // GNU: may return a static string
  return absl::StrCat(text, " (errno ", err, ")");
}

absl::Status ErrnoStatus(const std::string& what, const std::string& path, uint64_t offset,
                         uint64_t len, int err) {
  std::string msg =
      absl::StrCat(what, " of ", len, " bytes at offset ", offset, " in ", path, ": ",
                   ErrnoText(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::Status ShortTransferStatus(const std::string& what, const std::string& path,
                                 uint64_t offset, uint32_t len, int64_t got) {
  std::string msg = absl::StrCat("short ", what, " at offset ", offset, " in ", path, ": ", got,
                                 " of ", len, " bytes");
  if (what == "read") return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

}  // namespace zerostate::server::io
