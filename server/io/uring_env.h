// The real Env: files opened with O_DIRECT (buffered only where the
// filesystem refuses O_DIRECT) and queues backed by one io_uring each
// (liburing: io_uring_queue_init, io_uring_prep_read/_write,
// io_uring_submit, io_uring_wait_cqe).
#pragma once

#include <memory>

#include "server/io/env.h"

namespace zerostate::server::io {

// Stateless; one instance may be shared by every tier of the process.
std::shared_ptr<Env> NewUringEnv();

}  // namespace zerostate::server::io
