// errno values and short transfers turned into absl::Status values whose
// message names the operation, the file, the offset and the errno text.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zerostate::server::io {

// ENOSPC/EDQUOT → RESOURCE_EXHAUSTED, anything else → INTERNAL.
// E.g. "write of 8192 bytes at offset 4096 in /d/f: No space left on device (errno 28)".
[[nodiscard]] absl::Status ErrnoStatus(const std::string& what, const std::string& path,
                                       uint64_t offset, uint64_t len, int err);

// A transfer that moved fewer bytes than asked: DATA_LOSS for reads (the
// file is shorter than its contents should be), INTERNAL for writes.
[[nodiscard]] absl::Status ShortTransferStatus(const std::string& what, const std::string& path,
                                               uint64_t offset, uint32_t len, int64_t got);

std::string ErrnoText(int err);

}  // namespace zerostate::server::io
