#include "common/shm_segment.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zerostate {
namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The abstract address of ShmSocketName(data_port); *len gets its length.
sockaddr_un ShmAddress(int data_port, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = ShmSocketName(data_port);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

// A one-byte message with room for one descriptor (SCM_RIGHTS).
struct FdMessage {
  explicit FdMessage(char b) : byte(b) {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
};

}  // namespace

std::string ShmSocketName(int data_port) { return absl::StrCat("zerostate-data-", data_port); }

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Map(int fd, size_t bytes,
                                                            bool populate) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) {
    absl::Status s = Errno("shm segment: mmap");
    close(fd);
    return s;
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(fd, static_cast<uint8_t*>(p), bytes));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(size_t bytes, bool populate) {
  if (bytes == 0) return absl::InvalidArgumentError("shm segment: size 0");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  int fd = memfd_create("zerostate-data", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("shm segment: memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      (populate && fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) ||
      fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    absl::Status s = Errno("shm segment: size, allocate and seal");
    close(fd);
    return s;
  }
  return Map(fd, bytes, populate);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Attach(int fd, bool populate) {
  int seals = fcntl(fd, F_GET_SEALS);
  struct stat st {};
  if (seals < 0 || (seals & kSeals) != kSeals || fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return absl::FailedPreconditionError(
        "shm segment: not a memfd sealed against shrinking and growing, or empty");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  const bool allocated = static_cast<uint64_t>(st.st_blocks) * 512 >= bytes;
  return Map(fd, bytes, populate && allocated);
}

ShmSegment::~ShmSegment() {
  munmap(data_, size_);
  close(fd_);
}

absl::StatusOr<uint8_t*> ShmSegment::At(uint64_t offset, uint64_t bytes) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("shm range [", offset, ", +", bytes,
                                                   ") outside the segment of ", size_, " bytes"));
  }
  return data_ + offset;
}

absl::StatusOr<int> ListenShm(int data_port) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("shm listen: socket");
  socklen_t len = 0;
  sockaddr_un addr = ShmAddress(data_port, &len);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 128) != 0) {
    absl::Status s = Errno(absl::StrCat("shm listen: @", ShmSocketName(data_port)));
    close(fd);
    return s;
  }
  return fd;
}

absl::StatusOr<int> ConnectShm(int data_port) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("shm connect: socket");
  socklen_t len = 0;
  sockaddr_un addr = ShmAddress(data_port, &len);
  // A unix connect does not wait for the server to accept (only when its
  // backlog is full, which a non-blocking socket reports at once).
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    absl::Status s = Errno(absl::StrCat("shm connect: @", ShmSocketName(data_port)));
    close(fd);
    return s;
  }
  return fd;
}

absl::Status SendSegmentFd(int sock, int segment_fd) {
  FdMessage m('S');
  msghdr& msg = m.msg;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &segment_fd, sizeof(int));
  while (true) {
    if (sendmsg(sock, &msg, MSG_NOSIGNAL) == 1) return absl::OkStatus();
    if (errno != EINTR) return Errno("shm: send the segment");
  }
}

absl::StatusOr<int> RecvSegmentFd(int sock, absl::Time deadline) {
  while (true) {
    pollfd p{sock, POLLIN, 0};
    int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("shm: no segment in time");
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (r < 0 && errno != EINTR) return Errno("shm: poll");
    if (r <= 0) continue;
    FdMessage m(0);
    msghdr& msg = m.msg;
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return Errno("shm: receive the segment");
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    }
    if (n != 1 || fd < 0 || (msg.msg_flags & MSG_CTRUNC) != 0) {
      if (fd >= 0) close(fd);
      return absl::UnavailableError(
          "shm: expected a message of one byte with one memfd (SCM_RIGHTS)");
    }
    return fd;
  }
}

}  // namespace zerostate
