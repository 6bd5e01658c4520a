// TLS for the TCP data plane (common/data_stream.h): OpenSSL contexts
// made from the same PEM files as the gRPC port's credentials, and the
// handshakes of both ends. TLS 1.3 only, AES-GCM suites only (what the
// kernel's TLS offload takes), no session tickets (no resumption, and no
// record after the handshake but the stream's), full 16 KiB records,
// read-ahead (one recv takes up to two records), and the records handed to the kernel (kTLS, OpenSSL's
// SSL_OP_ENABLE_KTLS) after the handshake unless `kernel` is false or the
// kernel has no TLS. OpenSSL does every record; no secret leaves it.
// Thread-safe: a context is shared by every handshake made with it.
#pragma once

#include <signal.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/data_stream.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace zerostate {

// A server's context: certificate chain `cert_pem`, its key `key_pem`,
// and when `client_ca_pem` is not empty, clients must present a
// certificate that CA signed (mutual TLS). Errors: INVALID_ARGUMENT naming
// what did not parse or match (cert, key, CA).
[[nodiscard]] absl::StatusOr<std::shared_ptr<SSL_CTX>> ServerTlsContext(
    const std::string& cert_pem, const std::string& key_pem, const std::string& client_ca_pem,
    bool kernel);

// A client's context: trusts servers that `ca_pem` signed (empty: the
// system's roots, as gRPC's credentials without a CA; a server with TLS
// but no --tls_client_ca or --peer_tls_ca reaches its peers' data planes
// so) and, when `cert_pem` is not empty, presents it with `key_pem`.
// Errors: INVALID_ARGUMENT as above.
[[nodiscard]] absl::StatusOr<std::shared_ptr<SSL_CTX>> ClientTlsContext(const std::string& ca_pem,
                                                                        const std::string& cert_pem,
                                                                        const std::string& key_pem,
                                                                        bool kernel);

// The server's handshake on accepted socket `fd` (not owned), done by
// `deadline`. Errors: UNAUTHENTICATED (the client's certificate was
// refused, or none given under mutual TLS), UNAVAILABLE (not TLS, or the
// connection broke; with OpenSSL's reason), DEADLINE_EXCEEDED.
// The stream updates its sending key every `records_per_key` records
// (common/data_stream.h; tests make it small).
[[nodiscard]] absl::StatusOr<std::unique_ptr<DataStream>> TlsAccept(
    SSL_CTX* ctx, int fd, absl::Time deadline, uint64_t records_per_key = kTlsRecordsPerKey);

// The client's handshake on connected socket `fd` (not owned) with the
// server at `host` (a name or an IP address, checked against the server's
// certificate as gRPC does), done by `deadline`. Errors: UNAVAILABLE
// (the server's certificate was refused, not TLS, or the connection broke;
// with OpenSSL's reason), DEADLINE_EXCEEDED. Under TLS 1.3 a server that
// refuses this client's certificate says so after the client's handshake
// ended: the stream's first read fails (UNAVAILABLE naming the alert).
// `records_per_key` as TlsAccept's.
[[nodiscard]] absl::StatusOr<std::unique_ptr<DataStream>> TlsConnect(
    SSL_CTX* ctx, int fd, const std::string& host, absl::Time deadline,
    uint64_t records_per_key = kTlsRecordsPerKey);

// While alive, a SIGPIPE raised on this thread is dropped: OpenSSL writes
// to the socket with write(2), not send(MSG_NOSIGNAL), and a peer that went
// away must be an error, not the death of the process (a library must not
// change the process's signal handling). Around every OpenSSL call that
// may write to a socket: the handshakes, and DataStream's writes, reads
// (a failed read sends an alert) and close_notify. Blocks SIGPIPE for the
// thread meanwhile (four system calls); not reentrant. With `needed`
// false it does nothing: for a process that ignores SIGPIPE
// (SigpipeIgnored).
class ScopedNoSigpipe {
 public:
  explicit ScopedNoSigpipe(bool needed = true);
  ~ScopedNoSigpipe();
  ScopedNoSigpipe(const ScopedNoSigpipe&) = delete;
  ScopedNoSigpipe& operator=(const ScopedNoSigpipe&) = delete;

 private:
  const bool active_;
  sigset_t old_;
  bool was_pending_ = false;
};

// Whether this process ignores SIGPIPE now (SIG_IGN: zerostate-server and
// CPython set it at start), so that a write to a socket whose peer went
// away fails with EPIPE and raises no signal.
bool SigpipeIgnored();

// This thread's OpenSSL error queue as one line (e.g. the alert a peer
// sent, a refused certificate), emptied; "" when empty.
std::string TakeOpenSslErrors();

// Whether this kernel offers TLS offload (the "tls" TCP upper layer can be
// set on a connected socket). Opens and closes a loopback connection.
bool KernelTlsAvailable();

}  // namespace zerostate
