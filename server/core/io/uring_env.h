// The real Env: files opened with O_DIRECT (buffered only where the
// filesystem refuses O_DIRECT) and queues backed by one io_uring each
// (liburing: io_uring_queue_init, io_uring_prep_read/_write,
// io_uring_submit, io_uring_wait_cqe).
#pragma once

#include <memory>

#include "server/core/io/env.h"

namespace zerostate::server::io {

// One instance may be shared by every tier of the process. Where the kernel
// refuses io_uring (EPERM, EACCES, ENOSYS, ENOMEM: seccomp,
// io_uring_disabled, an old kernel, RLIMIT_MEMLOCK before Linux 5.12) its
// queues fall back to synchronous pread/pwrite (sync_queue.h), with one
// line on stderr.
std::shared_ptr<Env> NewUringEnv();

// The same files, every queue synchronous (pread/pwrite). For tests of that
// fallback, and for comparing it with io_uring.
std::shared_ptr<Env> NewSyncEnv();

}  // namespace zerostate::server::io
