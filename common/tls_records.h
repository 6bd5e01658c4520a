// The TLS 1.3 record layer of the data plane's streams where the kernel
// does not do it (no kTLS): records sealed and opened here with the
// traffic keys of the handshake OpenSSL did, as the kernel would.
//
// Why not OpenSSL's records: OpenSSL copies the plaintext into its own
// buffer before sealing it there, and copies what it opened out of its
// buffer into the caller's; a BIO between it and the socket copies the
// ciphertext once more each way. Here a record is sealed straight from the
// caller's memory into the buffer that is sent, and opened straight from
// the received bytes into the caller's memory (a gather's destination):
// per byte, the cipher and the socket's copy, as in plaintext plus AES-GCM.
//
// AES-GCM only (the data plane's suites), application data only: a record
// of another type ends the stream with an error naming it (an alert, e.g.
// the server refusing this client's certificate; a post-handshake message,
// which neither end sends: no tickets, no key update). No padding is sent;
// received padding is removed. Each direction's sequence starts at 0: the
// handshake (data_tls.cc) sends no record after its own, before the stream.
// An opened record's plaintext is written to the caller's memory before its
// tag is checked (as the kernel's kTLS does); when the check fails, the
// read fails and those bytes must not be used.
//
// Thread-compatible: a sealer is used by the sending thread, an opener by
// the receiving one.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

typedef struct ssl_st SSL;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace zerostate {

// TLS 1.3's largest plaintext per record.
inline constexpr size_t kTlsRecordPlaintext = 16 << 10;
// A record's bytes beyond its plaintext: header (5), inner type (1), tag (16).
inline constexpr size_t kTlsRecordOverhead = 5 + 1 + 16;

// The application traffic secrets of one handshake, as OpenSSL's keylog
// callback reports them (TlsSecretsCallback); erased when destroyed.
struct TlsTrafficSecrets {
  ~TlsTrafficSecrets();
  std::string client;  // CLIENT_TRAFFIC_SECRET_0, raw bytes
  std::string server;  // SERVER_TRAFFIC_SECRET_0
};

// The keylog callback of the data plane's contexts: stores the traffic
// secrets in the TlsTrafficSecrets that SSL_get_app_data(ssl) points to
// (none: ignored).
void TlsSecretsCallback(const SSL* ssl, const char* line);

// One direction's AES-GCM key and IV (RFC 8446 7.3) and its sequence.
class TlsRecordKey {
 public:
  // The key of the direction `ssl` (its handshake done) sends in
  // (`send`) or receives in, from `secrets`. Errors: INTERNAL naming what
  // is missing (a secret, a suite not AES-GCM) or what OpenSSL refused.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TlsRecordKey>> Make(
      SSL* ssl, const TlsTrafficSecrets& secrets, bool send);
  ~TlsRecordKey();
  TlsRecordKey(const TlsRecordKey&) = delete;
  TlsRecordKey& operator=(const TlsRecordKey&) = delete;

  // Seals the next `n` (<= kTlsRecordPlaintext) bytes of `iov[*at..]`
  // (*at and the iovecs advanced past them) into one record at `out`
  // (n + kTlsRecordOverhead bytes). Errors: INTERNAL (OpenSSL failed).
  [[nodiscard]] absl::Status Seal(iovec* iov, int* at, size_t n, char* out);
  // Opens the record at `record` (`len` bytes, header included) into `out`
  // (room for len - 5 - 16 bytes); returns its data's length (the inner
  // type and padding stripped). Errors: UNAVAILABLE (the tag does not
  // match, not data: an alert, named).
  [[nodiscard]] absl::StatusOr<size_t> Open(const char* record, size_t len, char* out);

 private:
  TlsRecordKey() = default;
  // The nonce of the next record: the IV xor the sequence number.
  void Nonce(unsigned char* nonce) const;

  EVP_CIPHER_CTX* ctx_ = nullptr;
  unsigned char iv_[12] = {};
  uint64_t seq_ = 0;
};

// Received ciphertext not yet opened, read from the socket in large pieces
// (one recv for many records), and the part of a record opened but not yet
// taken by a read smaller than it.
class TlsRecordReader {
 public:
  explicit TlsRecordReader(std::unique_ptr<TlsRecordKey> key);

  // Opens what is received into `p` (up to `n` bytes; as many whole records
  // as fit, up to `limit` bytes): the bytes given, 0 when no whole record is
  // received yet. Errors: UNAVAILABLE as TlsRecordKey::Open, and a record
  // longer than TLS allows.
  [[nodiscard]] absl::StatusOr<size_t> Read(char* p, size_t n, size_t limit);
  // Receives what socket `fd` has (non-blocking): true when bytes came,
  // false when none were there; Errors: UNAVAILABLE (the connection broke,
  // or closed: "connection closed", with `*closed` set).
  [[nodiscard]] absl::StatusOr<bool> Receive(int fd, bool* closed);
  // Whether a read would return bytes without receiving.
  bool Ready() const;

 private:
  // The length of the whole record at the inbox's front, or 0.
  size_t WholeRecord() const;

  std::unique_ptr<TlsRecordKey> key_;
  std::unique_ptr<char[]> inbox_;  // kInbox bytes; [at_, end_) not opened yet
  size_t at_ = 0;
  size_t end_ = 0;
  std::unique_ptr<char[]> opened_;  // one record's plaintext; [taken_, opened_end_) left
  size_t taken_ = 0;
  size_t opened_end_ = 0;
};

}  // namespace zerostate
