#include "common/data_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_tls.h"
#include "common/tls_records.h"

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

DataStream::DataStream(int fd, SSL* ssl, std::unique_ptr<TlsRecordKey> sealer,
                       std::unique_ptr<TlsRecordReader> reader)
    : fd_(fd),
      ssl_(ssl),
      kernel_send_(sealer == nullptr),
      kernel_recv_(reader == nullptr),
      sealer_(std::move(sealer)),
      reader_(std::move(reader)) {
  MakeNonBlocking(fd_);
}

absl::StatusOr<std::unique_ptr<DataStream>> DataStream::OverTls(int fd, SSL* ssl,
                                                                const TlsTrafficSecrets& secrets,
                                                                uint64_t records_per_key) {
  std::unique_ptr<TlsRecordKey> sealer;
  std::unique_ptr<TlsRecordReader> reader;
  absl::Status s;
  if (BIO_get_ktls_send(SSL_get_wbio(ssl)) == 0) {
    auto key = TlsRecordKey::Make(ssl, secrets, /*send=*/true, records_per_key);
    if (key.ok()) sealer = *std::move(key);
    s.Update(key.status());
  }
  if (BIO_get_ktls_recv(SSL_get_rbio(ssl)) == 0) {
    auto key = TlsRecordKey::Make(ssl, secrets, /*send=*/false);
    if (key.ok()) reader = std::make_unique<TlsRecordReader>(*std::move(key));
    s.Update(key.status());
  }
  if (!s.ok()) {
    SSL_free(ssl);
    return s;
  }
  return std::unique_ptr<DataStream>(new DataStream(fd, ssl, std::move(sealer), std::move(reader)));
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

absl::Status DataStream::SealAndSend(iovec* iov, int count) {
  constexpr size_t kRecords = (kTlsSendBatchBytes + kTlsRecordPlaintext - 1) / kTlsRecordPlaintext;
  if (sealed_ == nullptr) {  // room for a key update before each record
    sealed_ = std::make_unique<char[]>(kTlsSendBatchBytes +
                                       kRecords * (kTlsRecordOverhead + kTlsKeyUpdateRecord));
  }
  size_t left = 0;
  for (int i = 0; i < count; ++i) left += iov[i].iov_len;
  int at = 0;  // the iovec the next record starts in
  while (left > 0) {
    // One batch: up to kTlsSendBatchBytes of plaintext in full records.
    char* out = sealed_.get();
    for (size_t batch = std::min(left, kTlsSendBatchBytes); batch > 0;) {
      const size_t n = std::min(batch, kTlsRecordPlaintext);
      if (sealer_->Due()) {
        if (absl::Status s = sealer_->SealKeyUpdate(out); !s.ok()) return s;
        out += kTlsKeyUpdateRecord;
      }
      if (absl::Status s = sealer_->Seal(iov, &at, n, out); !s.ok()) return s;
      out += n + kTlsRecordOverhead;
      batch -= n;
      left -= n;
    }
    iovec sealed{sealed_.get(), static_cast<size_t>(out - sealed_.get())};
    if (absl::Status s = SendRaw(&sealed, 1); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DataStream::SendAll(iovec* iov, int count) {
  return kernel_send_ ? SendRaw(iov, count) : SealAndSend(iov, count);
}

absl::StatusOr<size_t> DataStream::RecvSome(void* p, size_t n) {
  while (true) {
    if (kernel_recv_) {
      ssize_t r = recv(fd_, p, n, MSG_DONTWAIT);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      // EIO: under kTLS, a record that is not data (a peer's alert).
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Errno("recv", errno);
    } else {
      absl::MutexLock lock(&recv_mu_);
      absl::StatusOr<size_t> got = reader_->Read(static_cast<char*>(p), n, kTlsRecvBatchBytes);
      if (!got.ok()) return absl::UnavailableError(absl::StrCat("recv: ", got.status().message()));
      if (*got > 0) return *got;
      bool closed = false;
      absl::StatusOr<bool> came = reader_->Receive(fd_, &closed);
      if (closed) return 0;
      if (!came.ok()) return came.status();
      if (*came) continue;
    }
    if (!Wait(POLLIN, recv_deadline_)) return Timeout("recv");
  }
}

uint64_t DataStream::KeyUpdatesSent() const { return sealer_ ? sealer_->updates() : 0; }

uint64_t DataStream::KeyUpdatesReceived() {
  if (kernel_recv_) return 0;
  absl::MutexLock lock(&recv_mu_);
  return reader_->key_updates();
}

bool DataStream::Buffered() {
  if (kernel_recv_) return false;
  absl::MutexLock lock(&recv_mu_);
  return reader_->Ready();
}

bool DataStream::WaitReadable(absl::Time deadline) { return Buffered() || Wait(POLLIN, deadline); }

}  // namespace zerostate
