#include "common/data_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerostate {
namespace {

// OpenSSL frees its global state at exit unless told not to. gRPC's executor
// threads outlive main() and may still be making a TLS channel then (a
// reconnect, a watched channel's state change): they read freed providers
// (ASan, heap-use-after-free in OSSL_DECODER_CTX_new_for_pkey, in a fault
// test's exit). The process's memory goes with it anyway, so the exit-time
// cleanup is turned off before anything starts OpenSSL.
[[maybe_unused]] const bool kNoExitCleanup =
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;

// OpenSSL's receive buffer during the handshake: two full TLS 1.3
// records and their headers, tags and inner types.
constexpr size_t kTlsReadAheadBytes = 2 * (kTlsRecordPlaintext + 256);
// The buffers under OpenSSL after the handshake (BufferRecords): a send
// batch's sealed records with room for a frame's first record; many
// records per recv(2).
constexpr size_t kTlsSendBufferBytes = kTlsSendBatchBytes + 2 * (kTlsRecordPlaintext + 256);
constexpr size_t kTlsRecvBufferBytes = 256 << 10;

// TLS 1.3's AES-GCM suites, the ones the kernel offloads; AES-128 first
// (the fewer rounds, the more GB/s per core; both are TLS 1.3 defaults).
constexpr char kSuites[] = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

absl::Status Invalid(const char* what) {
  std::string why = TakeOpenSslErrors();
  return absl::InvalidArgumentError(
      absl::StrCat("data plane TLS: ", what, ": ", why.empty() ? "no PEM data" : why));
}

std::shared_ptr<SSL_CTX> NewContext(const SSL_METHOD* method, bool kernel) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(method), SSL_CTX_free);
  if (!ctx) return ctx;
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx.get(), kSuites);
  // A write that would block is retried with the same bytes, possibly
  // from another buffer (a frame's staged first record). Buffers are kept
  // (no SSL_MODE_RELEASE_BUFFERS): a stream reuses them for every record.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  uint64_t options = SSL_OP_NO_TICKET;
  if (kernel && KernelTlsAvailable()) {
    options |= SSL_OP_ENABLE_KTLS;
  }
  // No SSL_OP_IGNORE_UNEXPECTED_EOF: a stream that ends without the
  // peer's close_notify (cut mid-record, or truncated by a third party)
  // is an error, not an end (DataStream::CloseSend sends it).
  SSL_CTX_set_options(ctx.get(), options);
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  SSL_CTX_set_max_send_fragment(ctx.get(), kTlsRecordPlaintext);
  // Until the handshake's end (and after it where the kernel takes the
  // records, or no buffer could be made: BufferRecords), one recv(2) takes
  // up to two records (OpenSSL counts those read ahead when it hands the
  // records to the kernel). Not more: OpenSSL 3.0 moves the bytes left in
  // its buffer to the front before each record (ssl3_read_n aligns the
  // next record's payload), so every byte read ahead is copied once more.
  SSL_CTX_set_read_ahead(ctx.get(), 1);
  SSL_CTX_set_default_read_buffer_len(ctx.get(), kTlsReadAheadBytes);
  return ctx;
}

// Adds every certificate of `pem` to the context's trust store.
absl::Status Trust(SSL_CTX* ctx, const std::string& pem, const char* what) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    added += X509_STORE_add_cert(store, cert) == 1;
    X509_free(cert);
  }
  BIO_free(bio);
  ERR_clear_error();  // the end of the PEM data
  if (added == 0) return Invalid(what);
  return absl::OkStatus();
}

// Loads the certificate chain and its key.
absl::Status UseIdentity(SSL_CTX* ctx, const std::string& cert_pem, const std::string& key_pem) {
  BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  bool ok = leaf != nullptr && SSL_CTX_use_certificate(ctx, leaf) == 1;
  X509_free(leaf);
  while (ok) {
    X509* extra = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) X509_free(extra);  // owned on success
  }
  BIO_free(bio);
  ERR_clear_error();
  if (!ok) return Invalid("the certificate does not parse");
  bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!ok) return Invalid("the private key does not parse");
  if (SSL_CTX_check_private_key(ctx) != 1) return Invalid("the key does not match the certificate");
  return absl::OkStatus();
}

// After the handshake, unless the kernel took a direction's records
// (kTLS): a buffer between OpenSSL and the socket, so that a batch's
// records leave in one send(2) (DataStream flushes it after each
// SSL_write_ex) and one recv(2) takes many records. The buffer reads
// ahead, so OpenSSL's own read-ahead goes off: OpenSSL then asks it for
// one record's header, then its body, each copied once into OpenSSL's
// record buffer, instead of taking the next record's bytes along and
// moving them to its buffer's front before each record (stream_bench's
// profile on 2 cores: that move was a third copy of every byte received).
void BufferRecords(SSL* ssl) {
  BIO* socket = SSL_get_rbio(ssl);  // both directions' BIO
  if (BIO_get_ktls_send(socket) != 0 || BIO_get_ktls_recv(socket) != 0) return;
  BIO* buffer = BIO_new(BIO_f_buffer());
  if (buffer == nullptr) return;  // no memory: unbuffered, as before
  if (BIO_set_read_buffer_size(buffer, kTlsRecvBufferBytes) != 1 ||
      BIO_set_write_buffer_size(buffer, kTlsSendBufferBytes) != 1) {
    BIO_free(buffer);
    return;
  }
  BIO_up_ref(socket);  // the buffer's reference; SSL_set_bio lets go of the SSL's two
  BIO_push(buffer, socket);
  SSL_set_bio(ssl, buffer, buffer);  // takes the one reference for both
  SSL_set_read_ahead(ssl, 0);
}

// Runs `step` (SSL_accept / SSL_connect) on non-blocking `fd` until done.
absl::StatusOr<std::unique_ptr<DataStream>> Handshake(SSL* ssl, int fd, absl::Time deadline,
                                                      int (*step)(SSL*), uint64_t records_per_key) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  ERR_clear_error();
  while (true) {
    int r;
    {
      ScopedNoSigpipe no_sigpipe;
      r = step(ssl);
    }
    if (r == 1) {
      BufferRecords(ssl);
      return std::make_unique<DataStream>(fd, ssl, records_per_key);
    }
    int code = SSL_get_error(ssl, r);
    short events = code == SSL_ERROR_WANT_READ    ? POLLIN
                   : code == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                  : 0;
    if (events == 0) {
      long verify = SSL_get_verify_result(ssl);
      std::string why = code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0
                            ? (errno != 0 ? std::strerror(errno) : "connection closed")
                            : TakeOpenSslErrors();
      absl::StatusCode status = absl::StatusCode::kUnavailable;
      if (verify != X509_V_OK) {
        status = SSL_is_server(ssl) ? absl::StatusCode::kUnauthenticated : status;
        why = absl::StrCat("the peer's certificate was refused: ",
                           X509_verify_cert_error_string(verify), " (", why, ")");
      }
      SSL_free(ssl);
      return absl::Status(status, absl::StrCat("TLS handshake: ", why));
    }
    absl::Duration left = deadline - absl::Now();
    pollfd p{fd, events, 0};
    int ms = deadline == absl::InfiniteFuture()
                 ? -1
                 : static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(left) + 1));
    if (ms == 0 || (poll(&p, 1, ms) == 0)) {
      SSL_free(ssl);
      return absl::DeadlineExceededError("TLS handshake: deadline exceeded");
    }
  }
}

}  // namespace

namespace {

sigset_t PipeSet() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  return pipe;
}

bool SigpipePending() {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

}  // namespace

ScopedNoSigpipe::ScopedNoSigpipe(bool needed) : active_(needed) {
  if (!active_) return;
  const sigset_t pipe = PipeSet();
  was_pending_ = SigpipePending();  // someone else's: left alone
  pthread_sigmask(SIG_BLOCK, &pipe, &old_);
}

ScopedNoSigpipe::~ScopedNoSigpipe() {
  if (!active_) return;
  const int saved_errno = errno;  // what the OpenSSL call left, for its caller
  if (!was_pending_ && SigpipePending()) {
    const sigset_t pipe = PipeSet();
    const timespec now{0, 0};
    while (sigtimedwait(&pipe, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  errno = saved_errno;
}

bool SigpipeIgnored() {
  struct sigaction now {};
  return sigaction(SIGPIPE, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) == 0 &&
         now.sa_handler == SIG_IGN;
}

std::string TakeOpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> ServerTlsContext(const std::string& cert_pem,
                                                          const std::string& key_pem,
                                                          const std::string& client_ca_pem,
                                                          bool kernel) {
  std::shared_ptr<SSL_CTX> ctx = NewContext(TLS_server_method(), kernel);
  if (!ctx) return Invalid("cannot make a context");
  if (auto s = UseIdentity(ctx.get(), cert_pem, key_pem); !s.ok()) return s;
  if (!client_ca_pem.empty()) {
    if (auto s = Trust(ctx.get(), client_ca_pem, "the client CA does not parse"); !s.ok()) {
      return s;
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> ClientTlsContext(const std::string& ca_pem,
                                                          const std::string& cert_pem,
                                                          const std::string& key_pem, bool kernel) {
  std::shared_ptr<SSL_CTX> ctx = NewContext(TLS_client_method(), kernel);
  if (!ctx) return Invalid("cannot make a context");
  if (ca_pem.empty()) {  // the system's roots, as gRPC's credentials without a CA
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return Invalid("cannot load the system's CA certificates");
    }
  } else if (auto s = Trust(ctx.get(), ca_pem, "the CA does not parse"); !s.ok()) {
    return s;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (!cert_pem.empty()) {
    if (auto s = UseIdentity(ctx.get(), cert_pem, key_pem); !s.ok()) return s;
  }
  return ctx;
}

absl::StatusOr<std::unique_ptr<DataStream>> TlsAccept(SSL_CTX* ctx, int fd, absl::Time deadline,
                                                      uint64_t records_per_key) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::UnavailableError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
  }
  return Handshake(ssl, fd, deadline, SSL_accept, records_per_key);
}

absl::StatusOr<std::unique_ptr<DataStream>> TlsConnect(SSL_CTX* ctx, int fd,
                                                       const std::string& host, absl::Time deadline,
                                                       uint64_t records_per_key) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::UnavailableError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
  }
  // An address is checked against the certificate's IP names, a name
  // against its DNS names (and sent as SNI).
  in6_addr any;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  bool ip =
      inet_pton(AF_INET, host.c_str(), &any) == 1 || inet_pton(AF_INET6, host.c_str(), &any) == 1;
  if (ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
  return Handshake(ssl, fd, deadline, SSL_connect, records_per_key);
}

bool KernelTlsAvailable() {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bool ok = listener >= 0 && bind(listener, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
            listen(listener, 1) == 0 &&
            getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int fd = ok ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
       setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls")) == 0;
  if (fd >= 0) close(fd);
  if (listener >= 0) close(listener);
  return ok;
}

}  // namespace zerostate
