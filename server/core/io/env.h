// The I/O layer under the NVMe tier, in the style of LevelDB's Env: files
// opened for direct I/O and queues that carry aligned reads and writes to
// them asynchronously. The real implementation (uring_env.h) uses O_DIRECT
// and io_uring; tests wrap it in a FaultEnv (fault_env.h) to inject errors.
//
// Errors are absl::Status values whose message names the file, the offset
// and the errno text (see io_error.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerostate::server::io {

// Offsets, lengths and buffer addresses of every request are multiples of
// this (the largest logical block size of common NVMe drives).
inline constexpr uint32_t kIoAlign = 4096;

enum class IoOp { kRead, kWrite };
const char* IoOpName(IoOp op);  // "read" / "write"

// An open file. Closed on destruction. Thread-safe.
class File {
 public:
  virtual ~File() = default;
  virtual const std::string& path() const = 0;
  // The descriptor that queues submit to (owned by the File).
  virtual int fd() const = 0;
  // False when the filesystem refused O_DIRECT and the file goes through
  // the page cache (tmpfs, some overlay setups).
  virtual bool direct() const = 0;
  // fdatasync. Errors: INTERNAL naming the file and errno.
  [[nodiscard]] virtual absl::Status Sync() = 0;
  // Reserves [0, bytes) on the disk so later writes cannot run out of
  // space (a no-op where the filesystem cannot). Errors: RESOURCE_EXHAUSTED
  // (ENOSPC), INTERNAL; both name the file.
  [[nodiscard]] virtual absl::Status Allocate(uint64_t bytes) = 0;
};

// One read or write. `buf` must stay valid until its completion is reaped.
struct IoRequest {
  IoOp op = IoOp::kRead;
  File* file = nullptr;
  uint64_t offset = 0;  // multiple of kIoAlign
  void* buf = nullptr;  // kIoAlign-aligned
  uint32_t len = 0;     // multiple of kIoAlign
  uint64_t tag = 0;     // the caller's, returned with the completion
};

struct IoCompletion {
  IoRequest req;
  int64_t result = 0;  // bytes transferred, or -errno
  // OK iff all req.len bytes were transferred. Errors: RESOURCE_EXHAUSTED
  // (ENOSPC, EDQUOT), DATA_LOSS (short read), INTERNAL (other errno, short
  // write); the message names op, file, offset and errno text.
  [[nodiscard]] absl::Status status() const;
};

// A submission/completion queue of at most depth() requests in flight.
// Not thread-safe: one thread owns a queue.
class IoQueue {
 public:
  virtual ~IoQueue() = default;  // REQUIRES: in_flight() == 0
  virtual int depth() const = 0;
  virtual int in_flight() const = 0;
  // Starts `r`. REQUIRES: in_flight() < depth(). Errors: INTERNAL when the
  // kernel refused the submission (nothing is in flight then).
  [[nodiscard]] virtual absl::Status Submit(const IoRequest& r) = 0;
  // Blocks until a request completes and returns it, in completion order.
  // REQUIRES: in_flight() > 0. Errors: INTERNAL when waiting itself failed.
  [[nodiscard]] virtual absl::StatusOr<IoCompletion> Wait() = 0;
};

// Thread-safe.
class Env {
 public:
  virtual ~Env() = default;
  // Creates `path` for direct read/write; fails with ALREADY_EXISTS when it
  // exists (so two tiers never share a file), INTERNAL/RESOURCE_EXHAUSTED
  // on other errors. Falls back to buffered I/O, with one log line on
  // stderr, only when the filesystem refuses O_DIRECT.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<File>> CreateFile(
      const std::string& path) = 0;
  [[nodiscard]] virtual absl::Status DeleteFile(const std::string& path) = 0;
  // Errors: INTERNAL (io_uring setup failed, e.g. locked-memory limits).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<IoQueue>> NewQueue(int depth) = 0;
};

// Submits one request on `q` and waits for it. REQUIRES: q.in_flight() == 0.
[[nodiscard]] absl::Status RunOne(IoQueue& q, const IoRequest& r);

}  // namespace zerostate::server::io
