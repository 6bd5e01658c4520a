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
#include <utility>

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

// The poll(2) events OpenSSL's SSL_ERROR_WANT_* asks for; 0 for a failure.
short WantedEvents(int error) {
  return error == SSL_ERROR_WANT_READ ? POLLIN : error == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
}

}  // namespace

DataStream::DataStream(int fd) : fd_(fd), ssl_(nullptr), records_per_key_(0), mask_sigpipe_(false) {
  MakeNonBlocking(fd_);
}

DataStream::DataStream(int fd, SSL* ssl, uint64_t records_per_key)
    : fd_(fd),
      ssl_(ssl),
      records_per_key_(std::max<uint64_t>(1, records_per_key)),
      mask_sigpipe_(!SigpipeIgnored()) {
  MakeNonBlocking(fd_);
}

DataStream::~DataStream() {
  if (ssl_ == nullptr) return;
  SendCloseNotify();
  SSL_free(ssl_);
}

std::string DataStream::Describe() const {
  if (ssl_ == nullptr) return "plaintext";
  absl::MutexLock lock(&mu_);
  const bool send = BIO_get_ktls_send(SSL_get_wbio(ssl_)) != 0;
  const bool recv = BIO_get_ktls_recv(SSL_get_rbio(ssl_)) != 0;
  const char* records = send && recv ? "records in the kernel (kTLS)"
                        : send       ? "records sent by the kernel (kTLS), received by OpenSSL"
                        : recv       ? "records sent by OpenSSL, received by the kernel (kTLS)"
                                     : "records in OpenSSL (userspace)";
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

absl::Status DataStream::SendAll(iovec* iov, int count) {
  return ssl_ == nullptr ? SendRaw(iov, count) : SendTls(iov, count);
}

absl::Status DataStream::SendRaw(iovec* iov, int count) {
  int first = 0;
  while (first < count) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = count - first;
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Errno("send", errno);
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

// Pieces shorter than a record (a frame's header and meta) are gathered
// with what follows into staged_ until it holds a full record; the rest of
// a large piece goes to OpenSSL straight from the caller's memory.
absl::Status DataStream::SendTls(iovec* iov, int count) {
  for (int i = 0; i < count; ++i) {
    char* p = static_cast<char*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      size_t n;
      absl::Status s;
      if (staged_.empty() && left >= kTlsRecordPlaintext) {
        n = std::min(left, BatchLimit());
        s = WriteTls(p, n);
      } else {
        n = std::min(left, kTlsRecordPlaintext - staged_.size());
        staged_.append(p, n);
        if (staged_.size() == kTlsRecordPlaintext) s = WriteTls(staged_.data(), staged_.size());
        if (staged_.size() == kTlsRecordPlaintext) staged_.clear();
      }
      if (!s.ok()) return s;
      p += n;
      left -= n;
    }
    iov[i].iov_len = 0;
  }
  if (staged_.empty()) return absl::OkStatus();
  absl::Status s = WriteTls(staged_.data(), staged_.size());
  staged_.clear();
  return s;
}

size_t DataStream::BatchLimit() const {
  const uint64_t records = records_this_key_ >= records_per_key_
                               ? records_per_key_  // a new key first
                               : records_per_key_ - records_this_key_;
  return kTlsRecordPlaintext *
         std::min<uint64_t>(records, kTlsSendBatchBytes / kTlsRecordPlaintext);
}

absl::Status DataStream::WriteTls(const char* p, size_t n) {
  bool written = false;
  while (true) {
    TlsResult r;
    {
      absl::MutexLock lock(&mu_);
      ScopedNoSigpipe no_sigpipe(mask_sigpipe_);  // one for the batch's write and flush
      r = written ? Flush() : WriteOnce(p, n);
      if (!written && r.error == 0) {
        written = true;
        r = Flush();
      }
    }
    if (r.error == 0) return absl::OkStatus();
    const short events = WantedEvents(r.error);
    if (events == 0) return absl::UnavailableError(absl::StrCat("send: ", r.why));
    if (!Wait(events, send_deadline_)) return Timeout("send");
  }
}

DataStream::TlsResult DataStream::Flush() {
  TlsResult r;
  BIO* out = SSL_get_wbio(ssl_);
  if (BIO_flush(out) > 0) return r;
  if (BIO_should_retry(out)) {
    r.error = SSL_ERROR_WANT_WRITE;
  } else {
    r.error = SSL_ERROR_SYSCALL;
    r.why = Why(r.error);
  }
  return r;
}

DataStream::TlsResult DataStream::WriteOnce(const char* p, size_t n) {
  TlsResult r;
  if (records_this_key_ >= records_per_key_) {
    // Sent by the SSL_write_ex below, before its records.
    if (SSL_key_update(ssl_, SSL_KEY_UPDATE_NOT_REQUESTED) != 1) {
      r.error = SSL_ERROR_SSL;
      r.why = Why(r.error);
      return r;
    }
    records_this_key_ = 0;
    ++key_updates_sent_;
  }
  ERR_clear_error();
  const int ok = SSL_write_ex(ssl_, p, n, &r.bytes);
  if (ok == 1) {
    records_this_key_ += (n + kTlsRecordPlaintext - 1) / kTlsRecordPlaintext;
    return r;
  }
  r.error = SSL_get_error(ssl_, ok);
  if (WantedEvents(r.error) == 0) r.why = Why(r.error);
  return r;
}

absl::StatusOr<size_t> DataStream::RecvSome(void* p, size_t n) {
  if (ssl_ != nullptr) return RecvTls(static_cast<char*>(p), n);
  while (true) {
    ssize_t r = recv(fd_, p, n, MSG_DONTWAIT);
    if (r >= 0) return static_cast<size_t>(r);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Errno("recv", errno);
    if (!Wait(POLLIN, recv_deadline_)) return Timeout("recv");
  }
}

absl::StatusOr<size_t> DataStream::RecvTls(char* p, size_t n) {
  while (true) {
    if (recv_ended_) return 0;
    if (!recv_failed_.ok()) return recv_failed_;
    TlsResult r;
    {
      absl::MutexLock lock(&mu_);
      r = ReadBatch(p, std::min(n, kTlsRecvBatchBytes));
    }
    const short events = WantedEvents(r.error);
    if (r.error == SSL_ERROR_ZERO_RETURN) {
      recv_ended_ = true;
    } else if (r.error != 0 && events == 0) {
      recv_failed_ = absl::UnavailableError(absl::StrCat("recv: ", r.why));
    }
    // What came before the end or an error is the caller's first.
    if (r.bytes > 0) return r.bytes;
    if (events != 0 && !Wait(events, recv_deadline_)) return Timeout("recv");
  }
}

DataStream::TlsResult DataStream::ReadBatch(char* p, size_t n) {
  TlsResult r;
  ERR_clear_error();
  ScopedNoSigpipe no_sigpipe(mask_sigpipe_);  // a failed read sends an alert
  while (r.bytes < n) {
    size_t got = 0;
    const int ok = SSL_read_ex(ssl_, p + r.bytes, n - r.bytes, &got);
    if (ok == 1) {
      r.bytes += got;
      continue;
    }
    r.error = SSL_get_error(ssl_, ok);
    if (WantedEvents(r.error) == 0 && r.error != SSL_ERROR_ZERO_RETURN) r.why = Why(r.error);
    break;
  }
  // Bytes and "wait for more" together: the bytes are the answer.
  if (r.bytes > 0 && WantedEvents(r.error) != 0) r.error = 0;
  return r;
}

std::string DataStream::Why(int error) const {
  std::string why = TakeOpenSslErrors();
  if (!why.empty()) return why;
  if (error == SSL_ERROR_SYSCALL) return errno != 0 ? std::strerror(errno) : "connection closed";
  return absl::StrCat("OpenSSL error ", error);
}

bool DataStream::Buffered() {
  if (ssl_ == nullptr) return false;
  absl::MutexLock lock(&mu_);
  return SSL_has_pending(ssl_) == 1 || BIO_pending(SSL_get_rbio(ssl_)) > 0;
}

bool DataStream::WaitReadable(absl::Time deadline) {
  return Buffered() || Wait(POLLIN, deadline);
}

void DataStream::SendCloseNotify() {
  absl::MutexLock lock(&mu_);
  if (std::exchange(close_notify_sent_, true)) return;
  ScopedNoSigpipe no_sigpipe(mask_sigpipe_);
  (void)SSL_shutdown(ssl_);  // sends close_notify; the peer's is not awaited
  ERR_clear_error();
}

void DataStream::CloseSend() {
  if (ssl_ != nullptr) SendCloseNotify();
  shutdown(fd_, SHUT_WR);
}

}  // namespace zerostate
