#include "common/frame_io.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/liveness.h"

namespace zerostate {

FrameBuffer::~FrameBuffer() { std::free(data_); }

uint8_t* FrameBuffer::Reserve(size_t bytes) {
  if (bytes <= capacity_) return data_;
  size_t rounded = (bytes + 63) / 64 * 64;
  std::free(data_);
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  capacity_ = data_ ? rounded : 0;
  return data_;
}

absl::Status SendFrame(DataStream& stream, FrameType type, const v1::DataFrameMeta& meta,
                       const void* payload, size_t payload_len) {
  std::string start = EncodeFrameStart(type, meta, payload_len);
  iovec iov[2] = {{start.data(), start.size()}, {const_cast<void*>(payload), payload_len}};
  return stream.SendAll(iov, payload_len > 0 ? 2 : 1);
}

absl::Status RecvExact(DataStream& stream, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    absl::StatusOr<size_t> r = stream.RecvSome(static_cast<char*>(p) + got, n - got);
    if (!r.ok()) return r.status();
    if (*r == 0) {
      return absl::DataLossError(
          absl::StrCat("connection closed after ", got, " of ", n, " bytes"));
    }
    got += *r;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<FrameStart>> RecvFrameStart(DataStream& stream) {
  uint8_t header[kFrameHeaderBytes];
  // The first byte apart: a close before it is the end of the conversation.
  absl::StatusOr<size_t> r = stream.RecvSome(header, 1);
  if (!r.ok()) return r.status();
  if (*r == 0) return std::nullopt;
  absl::Status s = RecvExact(stream, header + 1, kFrameHeaderBytes - 1);
  if (absl::IsDataLoss(s)) {
    return absl::DataLossError(absl::StrCat("truncated frame header: ", s.message()));
  }
  if (!s.ok()) return s;
  absl::StatusOr<FrameHeader> h = ParseFrameHeader(header);
  if (!h.ok()) return h.status();
  std::string meta(h->meta_len, '\0');
  s = RecvExact(stream, meta.data(), meta.size());
  if (absl::IsDataLoss(s)) {
    return absl::DataLossError(absl::StrCat("truncated frame meta: ", s.message()));
  }
  if (!s.ok()) return s;
  absl::StatusOr<v1::DataFrameMeta> m =
      ParseFrameMeta(h->type, reinterpret_cast<const uint8_t*>(meta.data()), meta.size());
  if (!m.ok()) return m.status();
  return FrameStart{*h, *std::move(m)};
}

void TuneDataSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof(one));
  int probes = kDeadPeerSeconds - 1;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  unsigned int user_timeout_ms = kDeadPeerSeconds * 1000;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

}  // namespace zerostate
