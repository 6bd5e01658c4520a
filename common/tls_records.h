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
// AES-GCM only (the data plane's suites), application data and key
// updates only: a record of another type ends the stream with an error
// naming it (an alert, e.g. the server refusing this client's certificate;
// another post-handshake message, which neither end sends: no tickets). No
// padding is sent; received padding is removed. Each direction's sequence
// starts at 0: the handshake (data_tls.cc) sends no record after its own,
// before the stream.
//
// Key updates (RFC 8446 4.6.3, 7.2): a sender seals at most
// `records_per_key` records under one key (default kTlsRecordsPerKey, below
// AES-GCM's limit of 2^24.5 full records per key, RFC 8446 5.5), then sends
// a KeyUpdate (update_not_requested) and moves to the next traffic secret;
// a receiver that opens one moves to the next secret for the records after
// it. A KeyUpdate that requests one back is refused by name: neither end of
// the data plane asks for one, and the receiving thread cannot send.
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
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct evp_md_st EVP_MD;

namespace zerostate {

// TLS 1.3's largest plaintext per record.
inline constexpr size_t kTlsRecordPlaintext = 16 << 10;
// A record's bytes beyond its plaintext: header (5), inner type (1), tag (16).
inline constexpr size_t kTlsRecordOverhead = 5 + 1 + 16;
// A sealed KeyUpdate: its handshake message (4 + 1) in one record.
inline constexpr size_t kTlsKeyUpdateRecord = 5 + kTlsRecordOverhead;
// Records sealed under one key before the sender updates it.
inline constexpr uint64_t kTlsRecordsPerKey = uint64_t{1} << 24;

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

// One direction's traffic secret, AES-GCM key and IV (RFC 8446 7.3) and
// its sequence.
class TlsRecordKey {
 public:
  // The key of the direction `ssl` (its handshake done) sends in
  // (`send`) or receives in, from `secrets`; a sending key is updated after
  // `records_per_key` (>= 1) records. Errors: INTERNAL naming what is
  // missing (a secret, a suite not AES-GCM) or what OpenSSL refused.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TlsRecordKey>> Make(
      SSL* ssl, const TlsTrafficSecrets& secrets, bool send,
      uint64_t records_per_key = kTlsRecordsPerKey);
  ~TlsRecordKey();
  TlsRecordKey(const TlsRecordKey&) = delete;
  TlsRecordKey& operator=(const TlsRecordKey&) = delete;

  // Seals the next `n` (<= kTlsRecordPlaintext) bytes of `iov[*at..]`
  // (*at and the iovecs advanced past them) into one record at `out`
  // (n + kTlsRecordOverhead bytes). Errors: INTERNAL (OpenSSL failed).
  [[nodiscard]] absl::Status Seal(iovec* iov, int* at, size_t n, char* out);
  // Whether this (sending) key sealed its records: the next record must be
  // SealKeyUpdate's.
  bool Due() const { return seq_ >= records_per_key_; }
  // Seals a KeyUpdate (update_not_requested) at `out` (kTlsKeyUpdateRecord
  // bytes), then moves to the next traffic secret. Errors: INTERNAL.
  [[nodiscard]] absl::Status SealKeyUpdate(char* out);
  // Keys moved to since the handshake's (sent or received updates).
  uint64_t updates() const { return updates_; }
  // Opens the record at `record` (`len` bytes, header included) into `out`
  // (room for len - 5 - 16 bytes); returns its data's length (the inner
  // type and padding stripped; 0 for a KeyUpdate, after which the next
  // secret opens the records). Errors: UNAVAILABLE (the tag does not
  // match, not data or a KeyUpdate: an alert, named; a KeyUpdate asking
  // for one back, or malformed).
  [[nodiscard]] absl::StatusOr<size_t> Open(const char* record, size_t len, char* out);

 private:
  TlsRecordKey() = default;
  // The nonce of the next record: the IV xor the sequence number.
  void Nonce(unsigned char* nonce) const;
  // Key and IV from secret_, sequence 0. False when OpenSSL failed.
  bool Derive();
  // The next traffic secret (RFC 8446 7.2), then Derive.
  absl::Status Update();
  // Seals `n` bytes of `iov[*at..]` as one record of inner type `type`.
  absl::Status SealRecord(iovec* iov, int* at, size_t n, unsigned char type, char* out);

  const EVP_MD* md_ = nullptr;
  const EVP_CIPHER* cipher_ = nullptr;
  bool send_ = false;
  std::string secret_;  // this key's traffic secret; erased when destroyed
  uint64_t records_per_key_ = kTlsRecordsPerKey;
  EVP_CIPHER_CTX* ctx_ = nullptr;
  unsigned char iv_[12] = {};
  uint64_t seq_ = 0;
  uint64_t updates_ = 0;
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
  // The peer's key updates opened so far.
  uint64_t key_updates() const { return key_->updates(); }

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
