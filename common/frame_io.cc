#include "common/frame_io.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerostate {
namespace {

absl::Status Errno(const char* what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": deadline exceeded"));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

FrameBuffer::~FrameBuffer() { std::free(data_); }

uint8_t* FrameBuffer::Reserve(size_t bytes) {
  if (bytes <= capacity_) return data_;
  size_t rounded = (bytes + 63) / 64 * 64;
  std::free(data_);
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  capacity_ = data_ ? rounded : 0;
  return data_;
}

absl::Status SendFrame(int fd, FrameType type, const v1::DataFrameMeta& meta, const void* payload,
                       size_t payload_len) {
  std::string start = EncodeFrameStart(type, meta, payload_len);
  iovec iov[2] = {{start.data(), start.size()}, {const_cast<void*>(payload), payload_len}};
  int first = 0;
  int count = payload_len > 0 ? 2 : 1;
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = count - first;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send", errno);
    }
    size_t left = static_cast<size_t>(n);
    while (first < count && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < count) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status RecvExact(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, static_cast<char*>(p) + got, n - got, 0);
    if (r == 0) {
      return absl::DataLossError(
          absl::StrCat("connection closed after ", got, " of ", n, " bytes"));
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("recv", errno);
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<FrameStart>> RecvFrameStart(int fd) {
  uint8_t header[kFrameHeaderBytes];
  // The first byte apart: a close before it is the end of the conversation.
  ssize_t r;
  do {
    r = recv(fd, header, 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  if (r < 0) return Errno("recv", errno);
  absl::Status s = RecvExact(fd, header + 1, kFrameHeaderBytes - 1);
  if (absl::IsDataLoss(s)) {
    return absl::DataLossError(absl::StrCat("truncated frame header: ", s.message()));
  }
  if (!s.ok()) return s;
  absl::StatusOr<FrameHeader> h = ParseFrameHeader(header);
  if (!h.ok()) return h.status();
  std::string meta(h->meta_len, '\0');
  s = RecvExact(fd, meta.data(), meta.size());
  if (absl::IsDataLoss(s)) {
    return absl::DataLossError(absl::StrCat("truncated frame meta: ", s.message()));
  }
  if (!s.ok()) return s;
  absl::StatusOr<v1::DataFrameMeta> m =
      ParseFrameMeta(h->type, reinterpret_cast<const uint8_t*>(meta.data()), meta.size());
  if (!m.ok()) return m.status();
  return FrameStart{*h, *std::move(m)};
}

void SetSocketDeadline(int fd, absl::Time deadline) {
  timeval tv{0, 0};  // zero: no timeout
  if (deadline != absl::InfiniteFuture()) {
    absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    tv = absl::ToTimeval(left);
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void TuneDataSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace zerostate
