#include "server/core/io/uring_env.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/core/io/io_error.h"
#include "server/core/io/sync_queue.h"

namespace zerostate::server::io {
namespace {

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixFile() override { close(fd_); }

  const std::string& path() const override { return path_; }
  int fd() const override { return fd_; }
  bool direct() const override { return direct_; }
  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", path_, 0, 0, errno);
    return absl::OkStatus();
  }
  absl::Status Allocate(uint64_t bytes) override {
    if (bytes == 0 || fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) == 0) {
      return absl::OkStatus();
    }
    if (errno == EOPNOTSUPP) return absl::OkStatus();
    return ErrnoStatus("fallocate", path_, 0, bytes, errno);
  }

 private:
  const std::string path_;
  const int fd_;
  const bool direct_;
};

class UringQueue final : public IoQueue {
 public:
  explicit UringQueue(int depth) : depth_(depth) {}
  ~UringQueue() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  // Returns 0 or the errno of io_uring_queue_init.
  int Init() {
    int rc = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    if (rc < 0) return -rc;
    ready_ = true;
    return 0;
  }

  int depth() const override { return depth_; }
  int in_flight() const override { return in_flight_; }

  absl::Status Submit(const IoRequest& r) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return absl::InternalError("io_uring: submission queue full");
    if (r.op == IoOp::kRead) {
      io_uring_prep_read(sqe, r.file->fd(), r.buf, r.len, r.offset);
    } else {
      io_uring_prep_write(sqe, r.file->fd(), r.buf, r.len, r.offset);
    }
    // The request outlives the SQE: the CQE hands this copy back.
    auto* copy = new IoRequest(r);
    io_uring_sqe_set_data(sqe, copy);
    int rc = io_uring_submit(&ring_);
    if (rc < 1) {
      delete copy;
      return ErrnoStatus(absl::StrCat("io_uring_submit of ", IoOpName(r.op)), r.file->path(),
                         r.offset, r.len, rc < 0 ? -rc : EAGAIN);
    }
    ++in_flight_;
    return absl::OkStatus();
  }

  absl::StatusOr<IoCompletion> Wait() override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return absl::InternalError(absl::StrCat("io_uring_wait_cqe: ", ErrnoText(-rc)));
    std::unique_ptr<IoRequest> req(static_cast<IoRequest*>(io_uring_cqe_get_data(cqe)));
    IoCompletion done{*req, cqe->res};
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
    return done;
  }

 private:
  const int depth_;
  io_uring ring_{};
  bool ready_ = false;
  int in_flight_ = 0;
};

class UringEnv final : public Env {
 public:
  explicit UringEnv(bool try_uring) : use_uring_(try_uring) {}

  absl::StatusOr<std::unique_ptr<File>> CreateFile(const std::string& path) override {
    constexpr int kFlags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = open(path.c_str(), kFlags | O_DIRECT, 0644);
    bool direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) {  // the filesystem has no O_DIRECT (tmpfs)
      fd = open(path.c_str(), kFlags, 0644);
      if (fd >= 0) {
        std::fprintf(stderr,
                     "zerostate: %s: filesystem refuses O_DIRECT; using buffered I/O "
                     "(throughput will include the page cache)\n",
                     path.c_str());
      }
    }
    if (fd < 0) {
      int err = errno;
      std::string msg = absl::StrCat("create ", path, ": ", ErrnoText(err));
      if (err == EEXIST) return absl::AlreadyExistsError(msg);
      if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
      return absl::InternalError(msg);
    }
    return std::make_unique<PosixFile>(path, fd, direct);
  }

  absl::Status DeleteFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("unlink ", path, ": ", ErrnoText(errno)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<IoQueue>> NewQueue(int depth) override {
    if (depth < 1) {
      return absl::InvalidArgumentError(absl::StrCat("queue depth ", depth, " must be >= 1"));
    }
    if (!use_uring_.load()) return NewSyncQueue(depth);
    auto q = std::make_unique<UringQueue>(depth);
    int err = q->Init();
    if (err == 0) return q;
    // EPERM/EACCES: seccomp or io_uring_disabled; ENOSYS: no io_uring; ENOMEM:
    // rings count against RLIMIT_MEMLOCK before Linux 5.12.
    if (err != EPERM && err != ENOSYS && err != EACCES && err != ENOMEM) {
      return absl::InternalError(
          absl::StrCat("io_uring_queue_init(depth ", depth, "): ", ErrnoText(err)));
    }
    if (use_uring_.exchange(false)) {
      std::fprintf(stderr,
                   "zerostate: io_uring is not allowed here (%s); using synchronous "
                   "pread/pwrite, without overlap of disk and compute\n",
                   ErrnoText(err).c_str());
    }
    return NewSyncQueue(depth);
  }

 private:
  // False once the kernel refused io_uring (then every queue is synchronous).
  std::atomic<bool> use_uring_;
};

}  // namespace

std::shared_ptr<Env> NewUringEnv() { return std::make_shared<UringEnv>(/*try_uring=*/true); }

std::shared_ptr<Env> NewSyncEnv() { return std::make_shared<UringEnv>(/*try_uring=*/false); }

}  // namespace zerostate::server::io
