#include "common/data_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/data_tls.h"

namespace zerostate {
namespace {

void MakeNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

absl::Status Errno(const char* what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status Timeout(const char* what) {
  return absl::DeadlineExceededError(absl::StrCat(what, ": deadline exceeded"));
}

}  // namespace

DataStream::DataStream(int fd) : fd_(fd), ssl_(nullptr), kernel_send_(true), kernel_recv_(true) {
  MakeNonBlocking(fd_);
}

DataStream::DataStream(int fd, SSL* ssl)
    : fd_(fd),
      ssl_(ssl),
      kernel_send_(BIO_get_ktls_send(SSL_get_wbio(ssl)) != 0),
      kernel_recv_(BIO_get_ktls_recv(SSL_get_rbio(ssl)) != 0) {
  MakeNonBlocking(fd_);
}

DataStream::~DataStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // no close_notify: the socket's end says enough
}

std::string DataStream::Describe() const {
  if (ssl_ == nullptr) return "plaintext";
  const char* records = kernel_send_ && kernel_recv_ ? "records in the kernel (kTLS)"
                        : kernel_send_ ? "records sent by the kernel (kTLS), received by OpenSSL"
                        : kernel_recv_ ? "records sent by OpenSSL, received by the kernel (kTLS)"
                                       : "records in OpenSSL (userspace)";
  absl::MutexLock lock(&mu_);
  return absl::StrCat(SSL_get_version(ssl_), " ", SSL_get_cipher_name(ssl_), ", ", records);
}

std::string DataStream::PeerSubject() const {
  if (ssl_ == nullptr) return "";
  absl::MutexLock lock(&mu_);
  X509* peer = SSL_get0_peer_certificate(ssl_);  // not owned
  if (peer == nullptr) return "";
  char name[512];
  X509_NAME_oneline(X509_get_subject_name(peer), name, sizeof(name));
  return name;
}

bool DataStream::Wait(short events, absl::Time deadline) {
  while (true) {
    int ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      absl::Duration left = absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1));
      ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 0, 1 << 30));
    }
    pollfd p{fd_, events, 0};
    int r = poll(&p, 1, ms);
    if (r > 0) return true;  // ready, or an error the next call reports
    if (r == 0) return false;
    if (errno != EINTR) return true;
  }
}

int DataStream::SslIo(bool write, void* p, size_t n, std::string* error) {
  absl::MutexLock lock(&mu_);
  ScopedNoSigpipe no_sigpipe;
  ERR_clear_error();
  int len = static_cast<int>(std::min<size_t>(n, 1 << 30));
  int r = write ? SSL_write(ssl_, p, len) : SSL_read(ssl_, p, len);
  if (r > 0) return r;
  int code = SSL_get_error(ssl_, r);
  if (code == SSL_ERROR_SYSCALL) {
    *error = errno != 0 ? std::strerror(errno) : "connection closed";
  } else if (code == SSL_ERROR_SSL) {
    *error = absl::StrCat("TLS: ", TakeOpenSslErrors());
  }
  return -code;
}

absl::Status DataStream::SendAll(iovec* iov, int count) {
  int first = 0;
  while (first < count) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    ssize_t n;
    if (kernel_send_) {
      msghdr msg{};
      msg.msg_iov = iov + first;
      msg.msg_iovlen = count - first;
      n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Errno("send", errno);
    } else {
      std::string error;
      n = SslIo(true, iov[first].iov_base, iov[first].iov_len, &error);
      if (n == -SSL_ERROR_WANT_READ) {
        if (!Wait(POLLIN, send_deadline_)) return Timeout("send");
        continue;
      }
      if (n <= 0 && n != -SSL_ERROR_WANT_WRITE) {
        return absl::UnavailableError(absl::StrCat("send: ", error));
      }
    }
    if (n < 0) {  // the socket's buffer is full
      if (!Wait(POLLOUT, send_deadline_)) return Timeout("send");
      continue;
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

absl::StatusOr<size_t> DataStream::RecvSome(void* p, size_t n) {
  while (true) {
    short want = POLLIN;
    if (kernel_recv_) {
      ssize_t r = recv(fd_, p, n, MSG_DONTWAIT);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      // EIO: under kTLS, a record that is not data (a peer's alert).
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Errno("recv", errno);
    } else {
      std::string error;
      int r = SslIo(false, p, n, &error);
      if (r > 0) return static_cast<size_t>(r);
      if (r == -SSL_ERROR_ZERO_RETURN) return 0;
      if (r == -SSL_ERROR_WANT_WRITE) {
        want = POLLOUT;
      } else if (r != -SSL_ERROR_WANT_READ) {
        if (r == -SSL_ERROR_SYSCALL && error == "connection closed") return 0;
        return absl::UnavailableError(absl::StrCat("recv: ", error));
      }
    }
    if (!Wait(want, recv_deadline_)) return Timeout("recv");
  }
}

bool DataStream::Buffered() {
  if (ssl_ == nullptr || kernel_recv_) return false;
  absl::MutexLock lock(&mu_);
  return SSL_has_pending(ssl_) != 0;
}

bool DataStream::WaitReadable(absl::Time deadline) {
  return Buffered() || Wait(POLLIN, deadline);
}

}  // namespace zerostate
