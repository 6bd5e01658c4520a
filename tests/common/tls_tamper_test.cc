// What a TLS DataStream (common/data_stream.h) does with records its peer
// did not send as they are: the peer is a raw OpenSSL end
// (tests/testing/tls_peer.h) whose sealed records the test cuts, alters or
// follows with more. Each case is refused by name (OpenSSL's reason, in an
// UNAVAILABLE error) after exactly the bytes that were whole and
// authentic, and the stream stays ended: a later read fails the same way.
// A record after the peer's close_notify is never read: the stream ends
// at the close_notify. A peer's KeyUpdate asking for one back is answered.
// (The same cases against a server's data plane, where they must change
// no job: data_plane_tls_test.cc.)
#include <sys/socket.h>

#include <string>

#include "common/data_stream.h"
#include "common/data_tls.h"
#include "gtest/gtest.h"
#include "tests/testing/pattern.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/tls_contexts.h"
#include "tests/testing/tls_peer.h"

namespace zerostate {
namespace {

using testing::Pattern;
using testing::TlsPair;

const testing::TestCertificates& Certificates() {
  static const testing::TestCertificates* certs = new testing::TestCertificates(
      absl::StrCat(::testing::TempDir(), "zerostate_tls_tamper_test.", getpid()));
  return *certs;
}

class TlsTamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Certificates().ok()) << Certificates().Log();
    auto contexts = testing::MutualTlsContexts(Certificates(), /*kernel=*/false);
    ASSERT_TRUE(contexts.ok()) << contexts.status();
    contexts_ = *std::move(contexts);
    ASSERT_NO_FATAL_FAILURE(NewPair());
  }

  // A new session.
  void NewPair() {
    pair_.reset();
    auto pair = testing::HandshakePair(contexts_.server.get(), contexts_.client.get());
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::make_unique<TlsPair>(*std::move(pair));
    pair_->stream->SetDeadline(absl::Now() + absl::Seconds(20));
  }

  // Reads until the end or an error: the bytes read, and how it ended.
  std::pair<std::string, absl::Status> ReadAll() {
    std::string got;
    char buf[64 << 10];
    while (true) {
      absl::StatusOr<size_t> r = pair_->stream->RecvSome(buf, sizeof(buf));
      if (!r.ok()) return {got, r.status()};
      if (*r == 0) return {got, absl::OkStatus()};
      got.append(buf, *r);
    }
  }

  testing::TlsContexts contexts_;
  std::unique_ptr<TlsPair> pair_;
};

// One case: what the peer does and sends (then its side of the connection
// ends), the bytes the stream must read whole, and the reason it must
// then fail with ("": it must end cleanly, and stay ended).
struct Tamper {
  const char* name;
  void (*act)(TlsPair& pair);
  std::string whole;
  const char* why;
};

// The data of the cases: 40 KiB is two full records and one of 8 KiB.
const std::string& Data(int seed) {
  static const std::string* data[] = {new std::string(Pattern(40 << 10, 1)),
                                      new std::string(Pattern(1000, 2))};
  return *data[seed];
}

TEST_F(TlsTamperTest, EachTamperedWireIsRefusedByNameAfterTheWholeBytes) {
  const std::string two_records = Data(0).substr(0, 2 * kTlsRecordPlaintext);
  const Tamper cases[] = {
      {"a truncated record",
       [](TlsPair& p) {
         p.peer->Write(Data(0));
         const std::string wire = p.peer->Take();
         p.Send(wire.substr(0, wire.size() - 100));
       },
       two_records, "unexpected eof while reading"},
      {"an end without close_notify",
       [](TlsPair& p) {
         p.peer->Write(Data(1));
         p.Flush();
       },
       Data(1), "unexpected eof while reading"},
      {"a bad tag",
       [](TlsPair& p) {
         p.peer->Write(Data(0));
         std::string wire = p.peer->Take();
         wire.back() ^= 1;  // the last record's tag
         p.Send(wire);
       },
       two_records, "bad record mac"},
      {"a forged record",
       [](TlsPair& p) {
         p.peer->Write(Data(1));
         p.Flush();
         p.Send(std::string("\x17\x03\x03\x00\x40", 5) + Pattern(64, 5));
       },
       Data(1), "bad record mac"},
      {"plaintext",
       [](TlsPair& p) {
         p.peer->Write(Data(1));
         p.Flush();
         p.Send("PUSH plaintext frame");
       },
       Data(1), "wrong version number"},
      {"an alert mid-stream",
       [](TlsPair& p) {
         p.peer->Write(Data(1));
         // Handed a record it cannot open, the peer seals its fatal alert.
         p.peer->Open(std::string("\x17\x03\x03\x00\x20", 5) + Pattern(32, 8));
         p.Flush();
       },
       Data(1), "alert bad record mac"},
      {"a record after close_notify",
       [](TlsPair& p) {
         p.peer->Write(Data(1));
         p.peer->CloseNotify();
         p.peer->Write("after the end");
         p.Flush();
       },
       Data(1), ""},
  };
  for (const Tamper& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_NO_FATAL_FAILURE(NewPair());
    c.act(*pair_);
    shutdown(pair_->peer_fd, SHUT_WR);
    auto [got, status] = ReadAll();
    EXPECT_EQ(got.size(), c.whole.size());
    EXPECT_TRUE(got == c.whole) << "the bytes read differ from those sealed";
    if (*c.why == '\0') {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_TRUE(absl::IsUnavailable(status)) << status;
      EXPECT_NE(status.message().find(c.why), std::string::npos) << status;
    }
    // The stream stays ended: a later read fails the same way, or reads
    // the end again (never the record after close_notify).
    char more;
    absl::StatusOr<size_t> again = pair_->stream->RecvSome(&more, 1);
    EXPECT_EQ(again.status(), status) << "a read after the end";
    if (again.ok()) {
      EXPECT_EQ(*again, 0u) << "a byte after the end was read";
    }
  }
}

// A KeyUpdate that asks for one back is answered by OpenSSL at the
// stream's next write; the records after it are read under the new key.
TEST_F(TlsTamperTest, APeersKeyUpdateRequestIsAnswered) {
  const std::string before = Pattern(20 << 10, 10);
  const std::string after = Pattern(20 << 10, 11);
  ASSERT_TRUE(pair_->peer->Write(before));
  ASSERT_TRUE(pair_->peer->KeyUpdate(/*request=*/true));
  ASSERT_TRUE(pair_->peer->Write(after));
  pair_->peer->CloseNotify();
  ASSERT_TRUE(pair_->Flush());
  auto [got, status] = ReadAll();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(got == before + after);
  iovec iov{const_cast<char*>(before.data()), before.size()};
  ASSERT_TRUE(pair_->stream->SendAll(&iov, 1).ok());
  pair_->stream->CloseSend();
  std::string answer;
  char buf[64 << 10];
  for (ssize_t n; (n = recv(pair_->peer_fd, buf, sizeof(buf), 0)) > 0;) answer.append(buf, n);
  // The stream's own KeyUpdate came first, then its records.
  EXPECT_TRUE(pair_->peer->Open(answer) == before);
  EXPECT_EQ(pair_->peer->key_updates_received(), 1);
}

}  // namespace
}  // namespace zerostate
