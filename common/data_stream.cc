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
#include <optional>
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

// A write BIO that appends what OpenSSL writes (sealed records) to the
// std::string its data points to; it never blocks and never fails.
int AppendWrite(BIO* bio, const char* data, int len) {
  static_cast<std::string*>(BIO_get_data(bio))->append(data, static_cast<size_t>(len));
  return len;
}

long AppendCtrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;  // nothing is ever pending in the BIO itself
}

}  // namespace

struct TlsInbox {
  explicit TlsInbox(int socket) : fd(socket) {}
  const int fd;
  std::unique_ptr<char[]> bytes;  // kTlsRecvBatchBytes, from the first read
  size_t at = 0;   // bytes[at, end) wait to be taken
  size_t end = 0;
  bool eof = false;  // the peer closed the connection
  int error = 0;     // errno of the recv that failed, or 0
};

namespace {

// A read BIO that gives OpenSSL the bytes of a TlsInbox, refilled from its
// socket (kTlsRecvBatchBytes at most) when empty; a retry when the socket
// has nothing.
int InboxRead(BIO* bio, char* out, int len) {
  TlsInbox& in = *static_cast<TlsInbox*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (in.at == in.end) {
    if (in.bytes == nullptr) in.bytes = std::make_unique<char[]>(kTlsRecvBatchBytes);
    ssize_t n;
    do {
      n = recv(in.fd, in.bytes.get(), kTlsRecvBatchBytes, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      BIO_set_retry_read(bio);
      return -1;
    }
    if (n < 0) {
      in.error = errno;
      return -1;
    }
    in.eof = n == 0;
    if (n == 0) return 0;
    in.at = 0;
    in.end = static_cast<size_t>(n);
  }
  size_t take = std::min(static_cast<size_t>(len), in.end - in.at);
  std::memcpy(out, in.bytes.get() + in.at, take);
  in.at += take;
  return static_cast<int>(take);
}

long InboxCtrl(BIO* bio, int cmd, long, void*) {
  const TlsInbox& in = *static_cast<const TlsInbox*>(BIO_get_data(bio));
  switch (cmd) {
    case BIO_CTRL_PENDING:
      return static_cast<long>(in.end - in.at);
    case BIO_CTRL_EOF:
      return in.eof ? 1 : 0;
    case BIO_CTRL_FLUSH:
      return 1;
    default:
      return 0;
  }
}

// The methods of the two BIOs (OpenSSL calls them; `ctrl` answers its
// questions), made once and never changed; null when OpenSSL could not.
struct BioMethods {
  const BIO_METHOD* append;
  const BIO_METHOD* inbox;
};

const BIO_METHOD* NewMethod(const char* name, int (*read)(BIO*, char*, int),
                            int (*write)(BIO*, const char*, int),
                            long (*ctrl)(BIO*, int, long, void*)) {
  BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, name);
  if (m == nullptr) return nullptr;
  if (read != nullptr) BIO_meth_set_read(m, read);
  if (write != nullptr) BIO_meth_set_write(m, write);
  BIO_meth_set_ctrl(m, ctrl);
  return m;
}

const BioMethods& Methods() {
  static const BioMethods methods{
      NewMethod("zerostate sealed", nullptr, AppendWrite, AppendCtrl),
      NewMethod("zerostate inbox", InboxRead, nullptr, InboxCtrl)};
  return methods;
}

// A BIO of `method` whose data is `data`, or null when OpenSSL could not
// make one.
BIO* NewBio(const BIO_METHOD* method, void* data) {
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) return nullptr;
  BIO_set_data(bio, data);
  BIO_set_init(bio, 1);
  return bio;
}

// A BIO appending to `out`, or null when OpenSSL could not make one.
BIO* AppendBio(std::string* out) { return NewBio(Methods().append, out); }

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
  if (!kernel_send_) {
    // Records are sealed into sealed_ and sent in batches by SendSealed.
    // Without a BIO (out of memory) OpenSSL keeps writing to the socket,
    // one record per write: slower, still correct.
    if (BIO* bio = AppendBio(&sealed_)) SSL_set0_wbio(ssl_, bio);
  }
  if (!kernel_recv_) {
    // Records are read from inbox_, which recv(2)s in large pieces. What
    // OpenSSL already read from the socket stays in its own buffer, read
    // first. Without a BIO OpenSSL keeps reading the socket itself.
    auto inbox = std::make_unique<TlsInbox>(fd_);
    if (BIO* bio = NewBio(Methods().inbox, inbox.get())) {
      SSL_set0_rbio(ssl_, bio);
      inbox_ = std::move(inbox);
    }
  }
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

int DataStream::SslRead(void* p, size_t n, std::string* error) {
  absl::MutexLock lock(&mu_);
  // Only with kTLS sending does OpenSSL write to the socket (an alert).
  std::optional<ScopedNoSigpipe> no_sigpipe;
  if (kernel_send_) no_sigpipe.emplace();
  ERR_clear_error();
  size_t got = 0;
  while (got < n) {
    size_t r = 0;
    if (SSL_read_ex(ssl_, static_cast<char*>(p) + got, n - got, &r) == 1) {
      got += r;
      continue;
    }
    if (got > 0) {
      ERR_clear_error();  // the same condition shows again on the next call
      break;
    }
    int code = SSL_get_error(ssl_, 0);
    if (code == SSL_ERROR_SYSCALL) {
      const int err = inbox_ != nullptr ? std::exchange(inbox_->error, 0) : errno;
      *error = err != 0 ? std::strerror(err) : "connection closed";
    } else if (code == SSL_ERROR_SSL) {
      *error = absl::StrCat("TLS: ", TakeOpenSslErrors());
    }
    return -code;
  }
  return static_cast<int>(got);
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

absl::Status DataStream::Seal(const void* p, size_t n) {
  absl::MutexLock lock(&mu_);
  ERR_clear_error();
  size_t written = 0;
  // The write BIO never blocks: one call seals all of it (or fails).
  if (SSL_write_ex(ssl_, p, n, &written) == 1 && written == n) return absl::OkStatus();
  std::string why = TakeOpenSslErrors();
  return absl::UnavailableError(
      absl::StrCat("send: TLS: ", why.empty() ? "cannot seal the records" : why));
}

absl::Status DataStream::SendSealed() {
  {
    absl::MutexLock lock(&mu_);
    sending_.swap(sealed_);
  }
  iovec iov{sending_.data(), sending_.size()};
  absl::Status s = SendRaw(&iov, 1);
  sending_.clear();
  // The batch's memory goes back to sealed_ unless OpenSSL wrote there
  // meanwhile (an alert while reading): one batch's worth per stream.
  absl::MutexLock lock(&mu_);
  if (sealed_.empty()) sending_.swap(sealed_);
  return s;
}

absl::Status DataStream::SendAll(iovec* iov, int count) {
  if (kernel_send_) return SendRaw(iov, count);
  // Userspace records: sealed kTlsSendBatchBytes at a time; each batch
  // leaves in one send (with whatever smaller pieces came before it).
  size_t batched = 0;  // plaintext sealed since the last send
  for (int i = 0; i < count; ++i) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    for (size_t left = iov[i].iov_len; left > 0;) {
      size_t take = std::min(left, kTlsSendBatchBytes - batched);
      if (absl::Status s = Seal(p, take); !s.ok()) return s;
      p += take;
      left -= take;
      batched += take;
      if (batched == kTlsSendBatchBytes) {
        if (absl::Status s = SendSealed(); !s.ok()) return s;
        batched = 0;
      }
    }
  }
  return batched > 0 ? SendSealed() : absl::OkStatus();
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
      int r = SslRead(p, std::min(n, kTlsRecvBatchBytes), &error);
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
  return SSL_has_pending(ssl_) != 0 || (inbox_ != nullptr && inbox_->at < inbox_->end);
}

bool DataStream::WaitReadable(absl::Time deadline) {
  return Buffered() || Wait(POLLIN, deadline);
}

}  // namespace zerostate
