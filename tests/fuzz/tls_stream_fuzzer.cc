// Bytes from a network peer into the receive side of a handshaken TLS
// data plane stream (common/data_stream.h, OpenSSL's records): each input
// is a fresh session (a real mutual TLS handshake over a socket pair,
// tests/testing/tls_peer.h), then a sequence of the peer's moves
// (fuzz_util.h's framing: tag byte, 16-bit length, bytes):
//   tag % 6 == 0  raw bytes on the wire (a forged or plaintext record);
//              1  the bytes sealed as application data;
//              2  a KeyUpdate (asking for one back when bytes[0] is odd);
//              3  a close_notify (later records are sealed still);
//              4  a byte of the wire so far flipped (offset: bytes[0..1],
//                 mask: bytes[2] | 1);
//              5  the wire so far cut by bytes[0..1] bytes;
// after which the peer's side of the connection ends. The stream is read
// to its end or its error. It must never return a byte the peer did not
// seal before its close_notify, nor out of order (what it reads is a
// prefix of them); an untampered wire must read whole, ending cleanly
// after a close_notify and with an error without one.
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/data_tls.h"
#include "fuzz_util.h"
#include "quiet_logs.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/tls_contexts.h"
#include "tests/testing/tls_peer.h"

namespace {

using zerostate::testing::TlsContexts;

// Made once: certificates by the openssl tool, in a directory of this
// process's own.
const TlsContexts& Contexts() {
  static const TlsContexts* contexts = [] {
    zerostate::testing::TestCertificates certs(
        absl::StrCat("/tmp/zerostate_tls_stream_fuzzer.", getpid()));
    if (!certs.ok()) __builtin_trap();
    auto made = zerostate::testing::MutualTlsContexts(certs, /*kernel=*/false);
    if (!made.ok()) __builtin_trap();
    std::filesystem::remove_all(certs.dir());
    return new TlsContexts(*std::move(made));
  }();
  return *contexts;
}

size_t Le16(const std::string& b) {
  return (b.size() > 0 ? static_cast<uint8_t>(b[0]) : 0) |
         (b.size() > 1 ? static_cast<size_t>(static_cast<uint8_t>(b[1])) << 8 : 0);
}

// What the peer's moves came to.
struct Wire {
  std::string bytes;   // to send
  std::string sealed;  // the application data sealed before close_notify
  bool closed = false;
  bool tampered = false;
};

Wire PeerMoves(zerostate::testing::TlsPeer& peer, const uint8_t* data, size_t size) {
  Wire w;
  for (const zerostate::fuzz::Record& r : zerostate::fuzz::SplitRecords(data, size)) {
    w.bytes += peer.Take();
    switch (r.tag % 6) {
      case 0:
        w.bytes += r.bytes;
        w.tampered = w.tampered || !r.bytes.empty();
        break;
      case 1:
        if (!peer.Write(r.bytes)) __builtin_trap();
        if (!w.closed) w.sealed += r.bytes;
        break;
      case 2:
        if (!peer.KeyUpdate(!r.bytes.empty() && (r.bytes[0] & 1))) __builtin_trap();
        break;
      case 3:
        peer.CloseNotify();
        w.closed = true;
        break;
      case 4:
        if (!w.bytes.empty()) {
          const uint8_t mask = (r.bytes.size() > 2 ? static_cast<uint8_t>(r.bytes[2]) : 0) | 1;
          w.bytes[Le16(r.bytes) % w.bytes.size()] ^= static_cast<char>(mask);
          w.tampered = true;
        }
        break;
      case 5: {
        const size_t cut = std::min(Le16(r.bytes), w.bytes.size());
        w.bytes.resize(w.bytes.size() - cut);
        w.tampered = w.tampered || cut > 0;
        break;
      }
    }
  }
  w.bytes += peer.Take();
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  const TlsContexts& contexts = Contexts();
  auto pair = testing::HandshakePair(contexts.server.get(), contexts.client.get());
  if (!pair.ok()) {
    std::fprintf(stderr, "handshake: %s\n", pair.status().ToString().c_str());
    __builtin_trap();
  }
  const Wire wire = PeerMoves(*pair->peer, data, size);
  // Sent while the stream reads: the wire may be more than the socket holds.
  auto sent = std::async(std::launch::async, [&] {
    (void)pair->Send(wire.bytes);
    shutdown(pair->peer_fd, SHUT_WR);
  });
  DataStream& stream = *pair->stream;
  stream.SetDeadline(absl::Now() + absl::Seconds(10));
  std::string got;
  absl::Status ended;
  char buf[4096];
  while (true) {
    absl::StatusOr<size_t> r = stream.RecvSome(buf, sizeof(buf));
    if (!r.ok()) {
      ended = r.status();
      break;
    }
    if (*r == 0) break;
    got.append(buf, *r);
    if (got.size() > wire.sealed.size()) __builtin_trap();  // bytes the peer did not seal
  }
  char more;
  absl::StatusOr<size_t> again = stream.RecvSome(&more, 1);
  if (again.ok() != ended.ok() || (again.ok() && *again != 0)) __builtin_trap();
  shutdown(pair->stream_fd, SHUT_RDWR);  // a send still waiting ends
  sent.wait();
  if (absl::IsDeadlineExceeded(ended)) __builtin_trap();  // the end of the wire must end it
  if (wire.sealed.compare(0, got.size(), got) != 0) __builtin_trap();
  if (!wire.tampered) {
    if (got != wire.sealed) __builtin_trap();
    if (ended.ok() != wire.closed) __builtin_trap();
  }
  return 0;
}
