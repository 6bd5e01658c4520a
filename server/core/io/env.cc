#include "server/core/io/env.h"

#include "server/core/io/io_error.h"

namespace zerostate::server::io {

const char* IoOpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

absl::Status IoCompletion::status() const {
  const char* what = IoOpName(req.op);
  if (result < 0) {
    return ErrnoStatus(what, req.file->path(), req.offset, req.len, static_cast<int>(-result));
  }
  if (result != req.len) {
    return ShortTransferStatus(what, req.file->path(), req.offset, req.len, result);
  }
  return absl::OkStatus();
}

absl::Status RunOne(IoQueue& q, const IoRequest& r) {
  if (auto s = q.Submit(r); !s.ok()) return s;
  auto done = q.Wait();
  if (!done.ok()) return done.status();
  return done->status();
}

}  // namespace zerostate::server::io
