// The byte stream under the TCP data plane's frames (common/frame_io.h):
// a connected TCP socket, plaintext or TLS (common/data_tls.h).
//
// Under TLS every record is OpenSSL's: the stream calls SSL_write_ex and
// SSL_read_ex on the socket, and OpenSSL seals, opens, updates keys and
// handles alerts; where the handshake handed a direction to the kernel
// (kTLS), OpenSSL's calls go through it. No key or secret leaves OpenSSL.
// What the stream adds is the speed OpenSSL's API leaves to its caller:
// - writes of up to kTlsSendBatchBytes per SSL_write_ex (full 16 KiB
//   records, one OpenSSL call for many), a frame's small header and meta
//   sent in one record with the start of its payload; OpenSSL seals the
//   batch's records into a buffer (data_tls.cc) that Flush sends in one
//   send(2), not one write(2) per record;
// - read-ahead by the same buffer (data_tls.cc): one recv(2) takes up to
//   256 KiB of records, OpenSSL takes them from it a record at a time, and
//   one RecvSome opens as many records as fit, up to kTlsRecvBatchBytes;
// - a KeyUpdate (SSL_key_update) every `records_per_key` records sent,
//   below AES-GCM's limit per key (RFC 8446 5.5), which OpenSSL leaves to
//   its caller.
// Its end is OpenSSL's close_notify (CloseSend, and the destructor); a
// connection that ends without one, a record that fails its tag, an alert
// or anything OpenSSL refuses is an UNAVAILABLE error naming OpenSSL's
// reason, and nothing after it is read.
//
// Every wait is bounded by an absolute deadline per direction (none by
// default): a frame that trickles in one byte at a time still ends at its
// deadline. The socket is non-blocking; waits are poll(2).
//
// Thread-safety: one thread may send while another receives (the server's
// sessions do); two threads must not both send, or both receive. The
// OpenSSL object, which is not thread-safe, is only touched under mu_, held
// for one bounded piece of work at a time (a batch), never while waiting.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef struct ssl_st SSL;

namespace zerostate {

// TLS 1.3's largest plaintext per record.
inline constexpr size_t kTlsRecordPlaintext = 16 << 10;
// Records a TLS stream sends under one key before it updates it (AES-GCM
// allows 2^24.5 full records per key, RFC 8446 5.5).
inline constexpr uint64_t kTlsRecordsPerKey = uint64_t{1} << 24;
// Plaintext per SSL_write_ex of a TLS stream (at most): OpenSSL seals it in
// full records; the stream's lock is released between batches, so that the
// other direction's small frames (acknowledgements) do not wait long.
inline constexpr size_t kTlsSendBatchBytes = 256 << 10;
// Plaintext opened per RecvSome of a TLS stream (at most), for the same
// reason.
inline constexpr size_t kTlsRecvBatchBytes = 256 << 10;

class DataStream {
 public:
  // A plaintext stream on connected socket `fd` (not owned; made
  // non-blocking).
  explicit DataStream(int fd);
  // A TLS stream on `fd` whose handshake `ssl` (owned) completed; it
  // updates its sending key every `records_per_key` (>= 1) records.
  DataStream(int fd, SSL* ssl, uint64_t records_per_key);
  // Under TLS, sends close_notify first unless CloseSend did (without
  // waiting: when the socket's buffer is full, the peer sees no clean end).
  ~DataStream();
  DataStream(const DataStream&) = delete;
  DataStream& operator=(const DataStream&) = delete;

  int fd() const { return fd_; }
  bool tls() const { return ssl_ != nullptr; }
  // Key updates this stream sent (0 in plaintext). Sending thread only.
  uint64_t KeyUpdatesSent() const { return key_updates_sent_; }
  // "plaintext", or the TLS version and cipher with where the records are
  // done, e.g. "TLSv1.3 TLS_AES_128_GCM_SHA256, records in OpenSSL (userspace)".
  std::string Describe() const;
  // The subject of the peer's certificate ("/CN=..."); "" in plaintext or
  // when the peer presented none.
  std::string PeerSubject() const;

  // Waits of the sending / receiving side end at these (InfiniteFuture():
  // never). Each is set and used by that side's thread only.
  void SetSendDeadline(absl::Time deadline) { send_deadline_ = deadline; }
  void SetRecvDeadline(absl::Time deadline) { recv_deadline_ = deadline; }
  void SetDeadline(absl::Time deadline) {
    SetSendDeadline(deadline);
    SetRecvDeadline(deadline);
  }

  // Sends all of `iov[0..count)` (modified). Errors: UNAVAILABLE (the
  // connection broke, or OpenSSL failed: with the reason), DEADLINE_EXCEEDED.
  [[nodiscard]] absl::Status SendAll(iovec* iov, int count) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the sending side (the peer reads the end of the stream): under
  // TLS a close_notify, then shutdown(SHUT_WR). Sending thread only; no
  // SendAll after it.
  void CloseSend() ABSL_LOCKS_EXCLUDED(mu_);
  // Reads between 1 and `n` (> 0) bytes into `p` (under TLS, up to
  // kTlsRecvBatchBytes of several records); 0 at the end of the stream
  // (under TLS: the peer's close_notify; nothing after it is read).
  // Errors: UNAVAILABLE (with the reason; under TLS OpenSSL's: a record
  // that fails its tag, a peer's alert, an end without close_notify),
  // DEADLINE_EXCEEDED. After an error every later read fails the same way.
  [[nodiscard]] absl::StatusOr<size_t> RecvSome(void* p, size_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until a read would not wait (bytes, or the end); false when
  // `deadline` passed first. Under TLS, bytes OpenSSL read ahead count
  // (a read may still wait for the rest of their record).
  bool WaitReadable(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether bytes already received wait in OpenSSL (TLS only).
  bool Buffered() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What one OpenSSL call under mu_ came to.
  struct TlsResult {
    size_t bytes = 0;  // written or read
    int error = 0;     // SSL_get_error's, 0 when it succeeded
    std::string why;   // OpenSSL's reason for a failure
  };

  // Waits for `events` on the socket until `deadline`; false on timeout.
  bool Wait(short events, absl::Time deadline);
  // Plaintext: sends all of `iov[0..count)` (modified) on the socket.
  [[nodiscard]] absl::Status SendRaw(iovec* iov, int count);
  // TLS: sends all of `iov[0..count)` (modified) through WriteTls.
  [[nodiscard]] absl::Status SendTls(iovec* iov, int count);
  // TLS: the most plaintext the next SSL_write_ex may take: a batch, or
  // the records left under the current key (or the next one's, when due).
  size_t BatchLimit() const;
  // TLS: SSL_write_ex of `p[0..n)` (n <= kTlsSendBatchBytes) until done.
  [[nodiscard]] absl::Status WriteTls(const char* p, size_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // TLS: one SSL_write_ex, after a KeyUpdate when one is due.
  // REQUIRES: a ScopedNoSigpipe(mask_sigpipe_) alive (also for Flush).
  TlsResult WriteOnce(const char* p, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TLS: sends what the buffer under OpenSSL holds (data_tls.cc).
  TlsResult Flush() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TLS: SSL_read_ex into `p` until `n` bytes, or OpenSSL has none ready.
  TlsResult ReadBatch(char* p, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<size_t> RecvTls(char* p, size_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // OpenSSL's reason for the failure `error` of the last call, emptied
  // from the thread's queue.
  std::string Why(int error) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends close_notify once (without waiting).
  void SendCloseNotify() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;  // serializes every use of ssl_ after the handshake
  const int fd_;
  SSL* const ssl_ ABSL_PT_GUARDED_BY(mu_);
  const uint64_t records_per_key_;
  // Whether OpenSSL's calls need ScopedNoSigpipe: TLS, in a process that
  // did not ignore SIGPIPE when the stream was made (a process that does,
  // as zerostate-server and CPython, must keep ignoring it while streams
  // live; it saves four system calls per OpenSSL call).
  const bool mask_sigpipe_;
  bool close_notify_sent_ ABSL_GUARDED_BY(mu_) = false;
  // Sending thread only: records under the current key, key updates, and
  // a frame's small pieces gathered into one record.
  uint64_t records_this_key_ = 0;
  uint64_t key_updates_sent_ = 0;
  std::string staged_;
  // Receiving thread only: the peer's close_notify came; the error that
  // ended the stream (ok: none).
  bool recv_ended_ = false;
  absl::Status recv_failed_;
  absl::Time send_deadline_ = absl::InfiniteFuture();
  absl::Time recv_deadline_ = absl::InfiniteFuture();
};

}  // namespace zerostate
