// An IoQueue that does each request at once with pread/pwrite on the
// submitting thread: the fallback where io_uring is unavailable (a seccomp
// profile or kernel.io_uring_disabled forbids it). Same contract as any
// IoQueue; nothing is ever really in flight, so no overlap of I/O and
// compute. Not thread-safe.
#pragma once

#include <memory>

#include "server/core/io/env.h"

namespace zerostate::server::io {

// REQUIRES: depth >= 1.
std::unique_ptr<IoQueue> NewSyncQueue(int depth);

}  // namespace zerostate::server::io
