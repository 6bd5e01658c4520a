// The byte stream under the TCP data plane's frames (common/frame_io.h):
// a connected TCP socket, plaintext or TLS (common/data_tls.h). Under TLS
// each direction's records are done by the kernel where the handshake
// handed them to it (kTLS: the stream then sends and receives on the
// socket exactly as in plaintext, zero-copy on the user side), else by
// OpenSSL in userspace.
//
// Every wait is bounded by an absolute deadline per direction (none by
// default): a frame that trickles in one byte at a time still ends at its
// deadline. The socket is non-blocking; waits are poll(2).
//
// Userspace records (common/tls_records.h) are sealed straight from the
// caller's memory, kTlsSendBatchBytes of plaintext at a time, into a buffer
// that leaves in one send(2), so the kernel sees a few large writes rather
// than one per 16 KiB record. A batch may end anywhere in a frame; SendAll
// returns once every record of its bytes was sent. Received records are
// read from the socket kTlsRecvBatchBytes at a time and opened straight
// into the caller's memory, as many as fit, in one call. OpenSSL does the
// handshake only; after it, nothing but this stream touches the socket.
//
// Thread-safety: one thread may send while another receives (the server's
// sessions do); two threads must not both send, or both receive. The
// OpenSSL object, which is not thread-safe, is only touched under mu_;
// each direction's records only by that direction's thread.
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

// Plaintext sealed into records per send(2) of a TLS stream with
// userspace records (at most; the last batch of a SendAll is smaller).
inline constexpr size_t kTlsSendBatchBytes = 256 << 10;
// Bytes read from the socket per recv(2) of a TLS stream with userspace
// records (at most), and plaintext decrypted per hold of the stream's lock
// in RecvSome, so that the other direction's small frames
// (acknowledgements) do not wait long.
inline constexpr size_t kTlsRecvBatchBytes = 256 << 10;

class TlsRecordKey;
class TlsRecordReader;
struct TlsTrafficSecrets;

class DataStream {
 public:
  // A plaintext stream on connected socket `fd` (not owned; made
  // non-blocking).
  explicit DataStream(int fd);
  // A TLS stream on `fd` whose handshake `ssl` (owned, freed on error
  // too) completed, with the traffic secrets that handshake reported: each
  // direction goes through the kernel when OpenSSL enabled kTLS for it,
  // else through userspace records, whose sending key is updated every
  // `records_per_key` records (common/tls_records.h). Errors: INTERNAL
  // (see TlsRecordKey::Make).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DataStream>> OverTls(
      int fd, SSL* ssl, const TlsTrafficSecrets& secrets, uint64_t records_per_key);
  ~DataStream();
  DataStream(const DataStream&) = delete;
  DataStream& operator=(const DataStream&) = delete;

  int fd() const { return fd_; }
  bool tls() const { return ssl_ != nullptr; }
  // Whether the kernel does the records of each direction (plaintext: true).
  bool kernel_send() const { return kernel_send_; }
  bool kernel_recv() const { return kernel_recv_; }
  // Key updates of the userspace records (common/tls_records.h): sealed
  // (by the sending thread) and opened (by the receiving one); 0 in
  // plaintext and under kTLS.
  uint64_t KeyUpdatesSent() const;
  uint64_t KeyUpdatesReceived() ABSL_LOCKS_EXCLUDED(recv_mu_);
  // "plaintext", or the TLS version and cipher with where the records are
  // done, e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384, records in the kernel (kTLS)".
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
  // connection broke, with the reason), DEADLINE_EXCEEDED.
  [[nodiscard]] absl::Status SendAll(iovec* iov, int count);
  // Reads between 1 and `n` (> 0) bytes into `p` (under userspace TLS, up
  // to kTlsRecvBatchBytes of what is already received: several records);
  // 0 when the peer closed the stream. Errors: UNAVAILABLE (with the reason; under TLS a peer's
  // alert, e.g. a refused certificate), DEADLINE_EXCEEDED.
  [[nodiscard]] absl::StatusOr<size_t> RecvSome(void* p, size_t n);
  // Waits until a read would not wait (bytes, or the end); false when
  // `deadline` passed first.
  bool WaitReadable(absl::Time deadline);
  // Whether bytes already received wait to be read (a read returns them
  // without waiting).
  bool Buffered();

 private:
  // Waits for `events` on the socket until `deadline`; false on timeout.
  bool Wait(short events, absl::Time deadline);
  // Sends all of `iov[0..count)` (modified) on the socket.
  [[nodiscard]] absl::Status SendRaw(iovec* iov, int count);
  DataStream(int fd, SSL* ssl, std::unique_ptr<TlsRecordKey> sealer,
             std::unique_ptr<TlsRecordReader> reader);
  // Userspace records: seals all of `iov[0..count)` (modified) and sends it.
  [[nodiscard]] absl::Status SealAndSend(iovec* iov, int count);

  mutable absl::Mutex mu_;  // serializes every use of ssl_ after the handshake
  const int fd_;
  SSL* const ssl_ ABSL_PT_GUARDED_BY(mu_);
  const bool kernel_send_;
  const bool kernel_recv_;
  // Userspace records sent: their key, and the batch being sent (sending
  // thread only); null under kTLS and in plaintext.
  std::unique_ptr<TlsRecordKey> sealer_;
  std::unique_ptr<char[]> sealed_;
  // Userspace records received (receiving thread only; Buffered may be
  // asked from another), or null.
  mutable absl::Mutex recv_mu_;
  std::unique_ptr<TlsRecordReader> reader_ ABSL_PT_GUARDED_BY(recv_mu_);
  absl::Time send_deadline_ = absl::InfiniteFuture();
  absl::Time recv_deadline_ = absl::InfiniteFuture();
};

}  // namespace zerostate
