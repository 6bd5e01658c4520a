#include "tests/testing/tls_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_tls.h"

namespace zerostate::testing {
namespace {

// Bounds the blocking handshake on `fd` by `deadline`.
void SetSocketTimeouts(int fd, absl::Time deadline) {
  const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  timeval tv = absl::ToTimeval(left);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

TlsPeer::TlsPeer(SSL* ssl) : ssl_(ssl) {
  SSL_set_msg_callback(ssl_, OnMessage);
  SSL_set_msg_callback_arg(ssl_, this);
}

void TlsPeer::OnMessage(int write_p, int, int content_type, const void* buf, size_t len, SSL*,
                        void* arg) {
  if (!write_p && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      static_cast<const unsigned char*>(buf)[0] == SSL3_MT_KEY_UPDATE) {
    ++static_cast<TlsPeer*>(arg)->key_updates_received_;
  }
}

TlsPeer::~TlsPeer() { SSL_free(ssl_); }

absl::StatusOr<std::unique_ptr<TlsPeer>> TlsPeer::Connect(SSL_CTX* ctx, int fd,
                                                          absl::Time deadline) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::UnavailableError(absl::StrCat("TLS peer: ", TakeOpenSslErrors()));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  SetSocketTimeouts(fd, deadline);
  ERR_clear_error();
  int r;
  // A signal (a fuzzer's timer) interrupts the blocking socket: again.
  while ((r = SSL_connect(ssl)) != 1 && absl::Now() < deadline) {
    const int error = SSL_get_error(ssl, r);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) break;
  }
  if (r != 1) {
    std::string why = TakeOpenSslErrors();
    SSL_free(ssl);
    return absl::UnavailableError(absl::StrCat("TLS peer's handshake: ", why));
  }
  // From here on, records go to and come from memory.
  SSL_set0_rbio(ssl, BIO_new(BIO_s_mem()));
  SSL_set0_wbio(ssl, BIO_new(BIO_s_mem()));
  return std::unique_ptr<TlsPeer>(new TlsPeer(ssl));
}

bool TlsPeer::Write(std::string_view bytes) {
  size_t written = 0;
  return bytes.empty() || SSL_write_ex(ssl_, bytes.data(), bytes.size(), &written) == 1;
}

bool TlsPeer::KeyUpdate(bool request) {
  return SSL_key_update(ssl_, request ? SSL_KEY_UPDATE_REQUESTED : SSL_KEY_UPDATE_NOT_REQUESTED) ==
             1 &&
         SSL_do_handshake(ssl_) == 1;
}

void TlsPeer::CloseNotify() {
  (void)SSL_shutdown(ssl_);
  SSL_set_shutdown(ssl_, 0);
  ERR_clear_error();
}

std::string TlsPeer::Open(std::string_view bytes) {
  BIO_write(SSL_get_rbio(ssl_), bytes.data(), static_cast<int>(bytes.size()));
  std::string out;
  char buf[16 << 10];
  size_t got = 0;
  while (SSL_read_ex(ssl_, buf, sizeof(buf), &got) == 1) out.append(buf, got);
  ERR_clear_error();
  return out;
}

std::string TlsPeer::Take() {
  BIO* out = SSL_get_wbio(ssl_);
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::string bytes(data, static_cast<size_t>(std::max(0L, n)));
  (void)BIO_reset(out);
  return bytes;
}

TlsPair::TlsPair(TlsPair&& o) noexcept
    : peer_fd(std::exchange(o.peer_fd, -1)),
      stream_fd(std::exchange(o.stream_fd, -1)),
      peer(std::move(o.peer)),
      stream(std::move(o.stream)) {}

TlsPair::~TlsPair() {
  stream.reset();
  peer.reset();
  if (peer_fd >= 0) close(peer_fd);
  if (stream_fd >= 0) close(stream_fd);
}

bool TlsPair::Send(std::string_view bytes) const {
  while (!bytes.empty()) {
    const ssize_t n = send(peer_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

absl::StatusOr<TlsPair> HandshakePair(SSL_CTX* server, SSL_CTX* client, uint64_t records_per_key) {
  TlsPair pair;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::UnavailableError("socketpair failed");
  }
  pair.peer_fd = fds[0];
  pair.stream_fd = fds[1];
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  auto accepted = std::async(std::launch::async, [&] {
    return TlsAccept(server, pair.stream_fd, deadline, records_per_key);
  });
  absl::StatusOr<std::unique_ptr<TlsPeer>> peer = TlsPeer::Connect(client, pair.peer_fd, deadline);
  if (!peer.ok()) shutdown(pair.peer_fd, SHUT_RDWR);  // the accept ends now, not at the deadline
  absl::StatusOr<std::unique_ptr<DataStream>> stream = accepted.get();
  if (!peer.ok()) return peer.status();
  if (!stream.ok()) return stream.status();
  pair.peer = *std::move(peer);
  pair.stream = *std::move(stream);
  return pair;
}

}  // namespace zerostate::testing
