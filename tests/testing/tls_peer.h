// The other end of a data plane TLS session, as a test or a fuzzer drives
// it: a raw OpenSSL client whose handshake ran on a real socket, and whose
// records after it are sealed into memory (Take) instead of sent, so that
// the caller sends them as they are, cut, altered, reordered or followed
// by bytes of its own. It can also send a close_notify, a KeyUpdate, and
// (fed a record it cannot open) a fatal alert. Thread-compatible.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/data_stream.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace zerostate::testing {

class TlsPeer {
 public:
  // The client's handshake with `ctx` on connected socket `fd` (not
  // owned; made blocking), done by `deadline`. Errors: UNAVAILABLE with
  // OpenSSL's reason.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TlsPeer>> Connect(SSL_CTX* ctx, int fd,
                                                                       absl::Time deadline);
  ~TlsPeer();
  TlsPeer(const TlsPeer&) = delete;
  TlsPeer& operator=(const TlsPeer&) = delete;

  // Seals `bytes` as application data. False when OpenSSL refused.
  bool Write(std::string_view bytes);
  // Has the next Write send a KeyUpdate first (asking for one back when
  // `request`). False when OpenSSL refused.
  bool KeyUpdate(bool request);
  // Seals a close_notify; later Writes are sealed still (OpenSSL's own
  // guard lifted), as a broken or hostile peer would send them.
  void CloseNotify();
  // Opens `bytes` as if the other end had sent them; a record that fails
  // makes this end seal its fatal alert. Returns the plaintext opened.
  std::string Open(std::string_view bytes);
  // The bytes sealed since the last Take.
  std::string Take();
  // KeyUpdate messages this end opened.
  int key_updates_received() const { return key_updates_received_; }

 private:
  explicit TlsPeer(SSL* ssl);
  static void OnMessage(int write_p, int version, int content_type, const void* buf, size_t len,
                        SSL* ssl, void* arg);
  SSL* ssl_;
  int key_updates_received_ = 0;
};

// A TlsPeer and, at the other end of a new loopback TCP connection, a
// DataStream made by TlsAccept with `server` (the peer handshakes with
// `client`), its sending key updated every `records_per_key` records.
struct TlsPair {
  TlsPair() = default;
  TlsPair(TlsPair&& o) noexcept;
  TlsPair& operator=(TlsPair&&) = delete;
  ~TlsPair();
  int peer_fd = -1;    // owned: the peer's socket; send Take()'s bytes here
  int stream_fd = -1;  // owned
  std::unique_ptr<TlsPeer> peer;
  std::unique_ptr<DataStream> stream;

  // Sends all of `bytes` on peer_fd. False when the socket refused.
  bool Send(std::string_view bytes) const;
  // Sends the peer's sealed bytes (Take) on peer_fd.
  bool Flush() const { return Send(peer->Take()); }
};
[[nodiscard]] absl::StatusOr<TlsPair> HandshakePair(SSL_CTX* server, SSL_CTX* client,
                                                    uint64_t records_per_key = kTlsRecordsPerKey);

}  // namespace zerostate::testing
