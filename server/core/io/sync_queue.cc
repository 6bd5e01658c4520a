#include "server/core/io/sync_queue.h"

#include <unistd.h>

#include <cerrno>
#include <deque>

namespace zerostate::server::io {
namespace {

// Bytes moved by one pread/pwrite (retried on EINTR), or -errno.
int64_t Transfer(const IoRequest& r) {
  ssize_t n;
  do {
    n = r.op == IoOp::kRead ? pread(r.file->fd(), r.buf, r.len, static_cast<off_t>(r.offset))
                            : pwrite(r.file->fd(), r.buf, r.len, static_cast<off_t>(r.offset));
  } while (n < 0 && errno == EINTR);
  return n < 0 ? -static_cast<int64_t>(errno) : n;
}

class SyncQueue final : public IoQueue {
 public:
  explicit SyncQueue(int depth) : depth_(depth) {}

  int depth() const override { return depth_; }
  int in_flight() const override { return static_cast<int>(done_.size()); }

  absl::Status Submit(const IoRequest& r) override {
    done_.push_back(IoCompletion{r, Transfer(r)});
    return absl::OkStatus();
  }

  absl::StatusOr<IoCompletion> Wait() override {
    IoCompletion c = done_.front();
    done_.pop_front();
    return c;
  }

 private:
  const int depth_;
  std::deque<IoCompletion> done_;  // done, not yet reaped
};

}  // namespace

std::unique_ptr<IoQueue> NewSyncQueue(int depth) { return std::make_unique<SyncQueue>(depth); }

}  // namespace zerostate::server::io
