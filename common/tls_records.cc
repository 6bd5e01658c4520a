#include "common/tls_records.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/data_stream.h"

namespace zerostate {
namespace {

constexpr unsigned char kApplicationData = 23;
constexpr unsigned char kAlert = 21;
constexpr unsigned char kHandshake = 22;
// RFC 8446 4.6.3: handshake type key_update, a 3-byte length of 1, and
// whether the peer must update its own sending key too.
constexpr unsigned char kKeyUpdate = 24;
constexpr unsigned char kUpdateNotRequested = 0;
constexpr unsigned char kUpdateRequested = 1;
constexpr size_t kKeyUpdateMessage = 5;
static_assert(kKeyUpdateMessage + kTlsRecordOverhead == kTlsKeyUpdateRecord);
constexpr size_t kHeader = 5;
constexpr size_t kTag = 16;
// The longest record TLS 1.3 allows: plaintext, inner type and 255 bytes
// of padding and tag (RFC 8446 5.2: 2^14 + 256 after the header).
constexpr size_t kMaxRecordBody = kTlsRecordPlaintext + 256;
// Received ciphertext per recv (at most): what is left of a record, then
// the next records.
constexpr size_t kInbox = kTlsRecvBatchBytes;

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `hex` as bytes; "" when it is not hex.
std::string Unhex(absl::string_view hex) {
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = Hex(hex[2 * i]), lo = Hex(hex[2 * i + 1]);
    if (hi < 0 || lo < 0 || hex.size() % 2 != 0) return "";
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

absl::Status Internal(const std::string& what) {
  return absl::InternalError(absl::StrCat("data plane TLS records: ", what));
}

// HKDF-Expand-Label(secret, label, "", n) of RFC 8446 7.1 into `out`.
bool ExpandLabel(const EVP_MD* md, const std::string& secret, const std::string& label,
                 unsigned char* out, size_t n) {
  const std::string full = "tls13 " + label;
  std::string info;
  info.push_back(static_cast<char>(n >> 8));
  info.push_back(static_cast<char>(n & 0xff));
  info.push_back(static_cast<char>(full.size()));
  info += full;
  info.push_back('\0');  // no context
  EVP_PKEY_CTX* kdf = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  size_t got = n;
  bool ok = kdf != nullptr && EVP_PKEY_derive_init(kdf) == 1 &&
            EVP_PKEY_CTX_set_hkdf_mode(kdf, EVP_PKEY_HKDEF_MODE_EXPAND_ONLY) == 1 &&
            EVP_PKEY_CTX_set_hkdf_md(kdf, md) == 1 &&
            EVP_PKEY_CTX_set1_hkdf_key(kdf, reinterpret_cast<const unsigned char*>(secret.data()),
                                       static_cast<int>(secret.size())) == 1 &&
            EVP_PKEY_CTX_add1_hkdf_info(kdf, reinterpret_cast<const unsigned char*>(info.data()),
                                        static_cast<int>(info.size())) == 1 &&
            EVP_PKEY_derive(kdf, out, &got) == 1 && got == n;
  EVP_PKEY_CTX_free(kdf);
  return ok;
}

}  // namespace

TlsTrafficSecrets::~TlsTrafficSecrets() {
  OPENSSL_cleanse(client.data(), client.size());
  OPENSSL_cleanse(server.data(), server.size());
}

void TlsSecretsCallback(const SSL* ssl, const char* line) {
  auto* secrets = static_cast<TlsTrafficSecrets*>(SSL_get_app_data(ssl));
  if (secrets == nullptr) return;
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) return;
  if (parts[0] == "CLIENT_TRAFFIC_SECRET_0") secrets->client = Unhex(parts[2]);
  if (parts[0] == "SERVER_TRAFFIC_SECRET_0") secrets->server = Unhex(parts[2]);
}

absl::StatusOr<std::unique_ptr<TlsRecordKey>> TlsRecordKey::Make(SSL* ssl,
                                                                 const TlsTrafficSecrets& secrets,
                                                                 bool send,
                                                                 uint64_t records_per_key) {
  const SSL_CIPHER* suite = SSL_get_current_cipher(ssl);
  const int nid = suite != nullptr ? SSL_CIPHER_get_cipher_nid(suite) : NID_undef;
  const EVP_CIPHER* cipher = nid == NID_aes_128_gcm   ? EVP_aes_128_gcm()
                             : nid == NID_aes_256_gcm ? EVP_aes_256_gcm()
                                                      : nullptr;
  if (cipher == nullptr) {
    return Internal(absl::StrCat("the suite ", suite ? SSL_CIPHER_get_name(suite) : "(none)",
                                 " is not AES-GCM"));
  }
  const bool client_secret = SSL_is_server(ssl) ? !send : send;
  const std::string& secret = client_secret ? secrets.client : secrets.server;
  if (secret.empty()) {
    return Internal(absl::StrCat("OpenSSL did not report the ", client_secret ? "client" : "server",
                                 " traffic secret"));
  }
  std::unique_ptr<TlsRecordKey> out(new TlsRecordKey());
  out->md_ = SSL_CIPHER_get_handshake_digest(suite);
  out->cipher_ = cipher;
  out->send_ = send;
  out->secret_ = secret;
  out->records_per_key_ = std::max<uint64_t>(records_per_key, 1);
  out->ctx_ = EVP_CIPHER_CTX_new();
  if (out->md_ == nullptr || out->ctx_ == nullptr || !out->Derive()) {
    return Internal("cannot derive the record keys");
  }
  return out;
}

bool TlsRecordKey::Derive() {
  unsigned char key[32];
  const size_t key_len = static_cast<size_t>(EVP_CIPHER_get_key_length(cipher_));
  bool ok = key_len <= sizeof(key) && ExpandLabel(md_, secret_, "key", key, key_len) &&
            ExpandLabel(md_, secret_, "iv", iv_, sizeof(iv_)) &&
            EVP_CipherInit_ex(ctx_, cipher_, nullptr, key, nullptr, send_ ? 1 : 0) == 1;
  OPENSSL_cleanse(key, sizeof(key));
  seq_ = 0;
  return ok;
}

absl::Status TlsRecordKey::Update() {
  std::string next(secret_.size(), '\0');
  bool ok = ExpandLabel(md_, secret_, "traffic upd", reinterpret_cast<unsigned char*>(next.data()),
                        next.size());
  OPENSSL_cleanse(secret_.data(), secret_.size());
  secret_.swap(next);
  if (!ok || !Derive()) return Internal("cannot derive the next traffic secret");
  ++updates_;
  return absl::OkStatus();
}

TlsRecordKey::~TlsRecordKey() {
  EVP_CIPHER_CTX_free(ctx_);
  OPENSSL_cleanse(secret_.data(), secret_.size());
  OPENSSL_cleanse(iv_, sizeof(iv_));
}

void TlsRecordKey::Nonce(unsigned char* nonce) const {
  std::memcpy(nonce, iv_, sizeof(iv_));
  for (int i = 0; i < 8; ++i) nonce[11 - i] ^= static_cast<unsigned char>(seq_ >> (8 * i));
}

absl::Status TlsRecordKey::Seal(iovec* iov, int* at, size_t n, char* out) {
  return SealRecord(iov, at, n, kApplicationData, out);
}

absl::Status TlsRecordKey::SealKeyUpdate(char* out) {
  unsigned char message[kKeyUpdateMessage] = {kKeyUpdate, 0, 0, 1, kUpdateNotRequested};
  iovec v{message, sizeof(message)};
  int at = 0;
  if (absl::Status s = SealRecord(&v, &at, sizeof(message), kHandshake, out); !s.ok()) return s;
  return Update();
}

absl::Status TlsRecordKey::SealRecord(iovec* iov, int* at, size_t n, unsigned char type,
                                      char* out) {
  unsigned char nonce[12];
  Nonce(nonce);
  const size_t body = n + 1 + kTag;
  auto* w = reinterpret_cast<unsigned char*>(out);
  w[0] = kApplicationData;
  w[1] = 3;
  w[2] = 3;
  w[3] = static_cast<unsigned char>(body >> 8);
  w[4] = static_cast<unsigned char>(body & 0xff);
  int len = 0;
  bool ok = EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, nonce) == 1 &&
            EVP_EncryptUpdate(ctx_, nullptr, &len, w, kHeader) == 1;
  w += kHeader;
  for (size_t left = n; ok && left > 0;) {
    iovec& v = iov[*at];
    if (v.iov_len == 0) {
      ++*at;
      continue;
    }
    const size_t take = std::min(left, v.iov_len);
    ok = EVP_EncryptUpdate(ctx_, w, &len, static_cast<const unsigned char*>(v.iov_base),
                           static_cast<int>(take)) == 1;
    w += take;
    left -= take;
    v.iov_base = static_cast<char*>(v.iov_base) + take;
    v.iov_len -= take;
  }
  ok = ok && EVP_EncryptUpdate(ctx_, w, &len, &type, 1) == 1 &&
       EVP_EncryptFinal_ex(ctx_, w + 1, &len) == 1 &&
       EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_GET_TAG, kTag, w + 1) == 1;
  if (!ok) return Internal("cannot seal a record");
  ++seq_;
  return absl::OkStatus();
}

absl::StatusOr<size_t> TlsRecordKey::Open(const char* record, size_t len, char* out) {
  unsigned char nonce[12];
  Nonce(nonce);
  const auto* r = reinterpret_cast<const unsigned char*>(record);
  auto* w = reinterpret_cast<unsigned char*>(out);
  const size_t body = len - kHeader - kTag;
  int n = 0;
  bool ok = EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, nonce) == 1 &&
            EVP_DecryptUpdate(ctx_, nullptr, &n, r, kHeader) == 1 &&
            EVP_DecryptUpdate(ctx_, w, &n, r + kHeader, static_cast<int>(body)) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_TAG, kTag,
                                const_cast<unsigned char*>(r + len - kTag)) == 1 &&
            EVP_DecryptFinal_ex(ctx_, w + body, &n) == 1;
  if (!ok) {
    return absl::UnavailableError("TLS: a record failed its integrity check (bad_record_mac)");
  }
  ++seq_;
  size_t end = body;  // the inner type is the last byte that is not padding
  while (end > 0 && w[end - 1] == 0) --end;
  if (end == 0) return absl::UnavailableError("TLS: a record without a content type");
  const unsigned char type = w[end - 1];
  if (type == kApplicationData) return end - 1;
  if (type == kHandshake) {
    // One whole KeyUpdate per record, as SealKeyUpdate seals it.
    if (end - 1 != kKeyUpdateMessage || w[0] != kKeyUpdate || w[1] != 0 || w[2] != 0 || w[3] != 1 ||
        w[4] > kUpdateRequested) {
      return absl::UnavailableError(
          absl::StrCat("TLS: a handshake record of ", end - 1, " bytes (message type ", w[0],
                       ") after the handshake; only a whole KeyUpdate is taken on the data plane"));
    }
    if (w[4] == kUpdateRequested) {
      return absl::UnavailableError(
          "TLS: the peer's KeyUpdate requests one back (update_requested), which the data "
          "plane never sends; its updates are update_not_requested");
    }
    if (absl::Status s = Update(); !s.ok()) return absl::UnavailableError(s.message());
    return 0;
  }
  if (type == kAlert && end == 3) {
    return absl::UnavailableError(
        absl::StrCat("TLS: the peer sent the alert ", SSL_alert_desc_string_long(w[1])));
  }
  return absl::UnavailableError(
      absl::StrCat("TLS: a record of type ", type,
                   " after the handshake (only application data is taken on the data plane)"));
}

TlsRecordReader::TlsRecordReader(std::unique_ptr<TlsRecordKey> key) : key_(std::move(key)) {}

size_t TlsRecordReader::WholeRecord() const {
  if (end_ - at_ < kHeader) return 0;
  const auto* h = reinterpret_cast<const unsigned char*>(inbox_.get() + at_);
  const size_t len = kHeader + (size_t{h[3]} << 8 | h[4]);
  return end_ - at_ >= len ? len : 0;
}

bool TlsRecordReader::Ready() const { return taken_ < opened_end_ || WholeRecord() > 0; }

absl::StatusOr<size_t> TlsRecordReader::Read(char* p, size_t n, size_t limit) {
  size_t got = 0;
  while (got < n && got < limit) {
    if (taken_ < opened_end_) {
      const size_t take = std::min(n - got, opened_end_ - taken_);
      std::memcpy(p + got, opened_.get() + taken_, take);
      taken_ += take;
      got += take;
      continue;
    }
    if (end_ - at_ >= kHeader) {
      const auto* h = reinterpret_cast<const unsigned char*>(inbox_.get() + at_);
      const size_t body = size_t{h[3]} << 8 | h[4];
      if (h[0] != kApplicationData || body < 1 + kTag || body > kMaxRecordBody) {
        return absl::UnavailableError(absl::StrCat("TLS: a record of outer type ", h[0], " and ",
                                                   body, " bytes is not a TLS 1.3 record"));
      }
    }
    const size_t len = WholeRecord();
    if (len == 0) break;
    const char* record = inbox_.get() + at_;
    const size_t room = len - kHeader - kTag;  // data, inner type, padding
    absl::StatusOr<size_t> opened;
    if (n - got >= room) {
      opened = key_->Open(record, len, p + got);  // straight into the caller's memory
      if (opened.ok()) got += *opened;
    } else {
      if (opened_ == nullptr) opened_ = std::make_unique<char[]>(kMaxRecordBody);
      opened = key_->Open(record, len, opened_.get());
      taken_ = 0;
      opened_end_ = opened.ok() ? *opened : 0;
    }
    if (!opened.ok()) return opened.status();
    at_ += len;
  }
  return got;
}

absl::StatusOr<bool> TlsRecordReader::Receive(int fd, bool* closed) {
  if (inbox_ == nullptr) inbox_ = std::make_unique<char[]>(kInbox);
  // What is left is less than one record (Read took every whole one): it
  // moves to the front only when a whole record might not fit behind it.
  if (at_ == end_) {
    at_ = end_ = 0;
  } else if (kInbox - end_ < kHeader + kMaxRecordBody) {
    std::memmove(inbox_.get(), inbox_.get() + at_, end_ - at_);
    end_ -= at_;
    at_ = 0;
  }
  ssize_t r;
  do {
    r = recv(fd, inbox_.get() + end_, kInbox - end_, MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (r < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
  if (r == 0) {
    *closed = true;
    return absl::UnavailableError("recv: connection closed");
  }
  end_ += static_cast<size_t>(r);
  return true;
}

}  // namespace zerostate
