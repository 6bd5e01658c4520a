// DataStream (common/data_stream.h) over a real loopback TCP connection,
// plaintext and under mutual TLS with OpenSSL's records (written
// kTlsSendBatchBytes at a time, read ahead): bytes arrive whole and in
// order whatever the batch boundaries (inside a frame's header, its
// payload, between frames) and however the reader cuts its reads; both
// directions at once; a peer that went away mid-batch is an error, not a
// signal; the end is the peer's close_notify; the sending keys are updated
// every few records, each update read by the other end, and the bytes
// stay whole. (Records cut, altered, after close_notify or an alert:
// tls_tamper_test.cc.)
#include "common/data_stream.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include <atomic>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/data_tls.h"
#include "common/frame_io.h"
#include "gtest/gtest.h"
#include "tests/testing/pattern.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/tls_contexts.h"

namespace zerostate {
namespace {

using testing::Pattern;

// Two ends of one loopback TCP connection (owned).
struct SocketPair {
  int client = -1;
  int server = -1;
  ~SocketPair() {
    if (client >= 0) close(client);
    if (server >= 0) close(server);
  }
};

void ConnectPair(SocketPair* pair) {
  absl::Status s = testing::ConnectOnLoopback(&pair->client, &pair->server);
  ASSERT_TRUE(s.ok()) << s;
  TuneDataSocket(pair->client);
  TuneDataSocket(pair->server);
}

const testing::TestCertificates& Certificates() {
  static const testing::TestCertificates* certs = new testing::TestCertificates(
      absl::StrCat(::testing::TempDir(), "zerostate_data_stream_test.", getpid()));
  return *certs;
}

// Counts the KeyUpdate messages an end receives (OpenSSL's message
// callback; `arg` is a std::atomic<int>).
void CountKeyUpdates(int write_p, int, int content_type, const void* buf, size_t len, SSL*,
                     void* arg) {
  if (!write_p && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      static_cast<const unsigned char*>(buf)[0] == SSL3_MT_KEY_UPDATE) {
    ++*static_cast<std::atomic<int>*>(arg);
  }
}

class DataStreamTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ConnectPair(&sockets_));
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    if (!tls()) {
      client_ = std::make_unique<DataStream>(sockets_.client);
      server_ = std::make_unique<DataStream>(sockets_.server);
    } else {
      const testing::TestCertificates& certs = Certificates();
      ASSERT_TRUE(certs.ok()) << certs.Log();
      auto contexts = testing::MutualTlsContexts(certs, /*kernel=*/false);
      ASSERT_TRUE(contexts.ok()) << contexts.status();
      SSL_CTX_set_msg_callback(contexts->server.get(), CountKeyUpdates);
      SSL_CTX_set_msg_callback_arg(contexts->server.get(), &server_key_updates_);
      SSL_CTX_set_msg_callback(contexts->client.get(), CountKeyUpdates);
      SSL_CTX_set_msg_callback_arg(contexts->client.get(), &client_key_updates_);
      auto accepted = std::async(std::launch::async, [&] {
        return TlsAccept(contexts->server.get(), sockets_.server, deadline, records_per_key_);
      });
      auto connected = TlsConnect(contexts->client.get(), sockets_.client, "127.0.0.1", deadline,
                                  records_per_key_);
      auto served = accepted.get();
      ASSERT_TRUE(connected.ok()) << connected.status();
      ASSERT_TRUE(served.ok()) << served.status();
      client_ = *std::move(connected);
      server_ = *std::move(served);
      ASSERT_EQ(client_->Describe(),
                "TLSv1.3 TLS_AES_128_GCM_SHA256, records in OpenSSL (userspace)");
    }
    client_->SetDeadline(deadline);
    server_->SetDeadline(deadline);
  }

  bool tls() const { return GetParam(); }

  // Reads `n` bytes from `stream` in pieces of the sizes `cuts` cycles
  // through.
  static absl::StatusOr<std::string> ReadInPieces(DataStream& stream, size_t n,
                                                  const std::vector<size_t>& cuts) {
    std::string got(n, '\0');
    size_t at = 0;
    for (size_t i = 0; at < n; ++i) {
      size_t want = std::min(cuts[i % cuts.size()], n - at);
      absl::StatusOr<size_t> r = stream.RecvSome(got.data() + at, want);
      if (!r.ok()) return r.status();
      if (*r == 0) return absl::DataLossError(absl::StrCat("closed after ", at, " bytes"));
      EXPECT_LE(*r, want);
      at += *r;
    }
    return got;
  }

  // Each end sends `bytes` while it receives the other's, on two threads
  // per stream (as a server session reads pushes while it sends answers),
  // in frames of 1 MiB as the data plane sends them; both arrive whole.
  void SendBothWaysAndCheck(size_t bytes) {
    const std::string up = Pattern(bytes, 7);
    const std::string down = Pattern(bytes, 8);
    auto send = [](DataStream* stream, const std::string* data) {
      for (size_t at = 0; at < data->size(); at += 1 << 20) {
        iovec iov{const_cast<char*>(data->data() + at),
                  std::min<size_t>(1 << 20, data->size() - at)};
        if (absl::Status s = stream->SendAll(&iov, 1); !s.ok()) return s;
      }
      return absl::OkStatus();
    };
    auto up_sent = std::async(std::launch::async, send, client_.get(), &up);
    auto down_sent = std::async(std::launch::async, send, server_.get(), &down);
    auto up_got = std::async(std::launch::async, [&] {
      return ReadInPieces(*server_, up.size(), {1 << 20, 333});
    });
    absl::StatusOr<std::string> down_got = ReadInPieces(*client_, down.size(), {5000, 1 << 20});
    ASSERT_TRUE(up_sent.get().ok());
    ASSERT_TRUE(down_sent.get().ok());
    absl::StatusOr<std::string> up_received = up_got.get();
    ASSERT_TRUE(up_received.ok()) << up_received.status();
    ASSERT_TRUE(down_got.ok()) << down_got.status();
    EXPECT_TRUE(*up_received == up);
    EXPECT_TRUE(*down_got == down);
  }

  void ExpectAPeerGoneMidBatchIsUnavailable();

  uint64_t records_per_key_ = kTlsRecordsPerKey;
  std::atomic<int> server_key_updates_{0};  // received
  std::atomic<int> client_key_updates_{0};
  SocketPair sockets_;
  std::unique_ptr<DataStream> client_;
  std::unique_ptr<DataStream> server_;
};

TEST_P(DataStreamTest, BatchBoundariesInsideAPieceArriveWholeAndInOrder) {
  // Pieces that end 5 bytes before a batch boundary, straddle it with 10
  // bytes, then run on past the next one: every boundary falls mid-piece.
  const std::vector<std::string> pieces = {Pattern(kTlsSendBatchBytes - 5, 1), Pattern(10, 2),
                                           Pattern(kTlsSendBatchBytes + 3, 3), Pattern(1, 4)};
  std::vector<iovec> iov;
  std::string all;
  for (const std::string& p : pieces) {
    iov.push_back({const_cast<char*>(p.data()), p.size()});
    all += p;
  }
  auto sent = std::async(std::launch::async, [&] {
    return client_->SendAll(iov.data(), static_cast<int>(iov.size()));
  });
  // Reads of a byte, of less than a record, of a record and a bit, and of
  // more than a batch.
  absl::StatusOr<std::string> got =
      ReadInPieces(*server_, all.size(), {1, 7777, 16 * 1024 + 3, 3 * kTlsSendBatchBytes});
  ASSERT_TRUE(sent.get().ok());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == all) << "the bytes received differ from those sent";
}

TEST_P(DataStreamTest, FramesLargerThanABatchAreReadBackAsFrames) {
  // Frames of 3 batches and a bit back to back, then a frame without
  // payload: frame starts fall anywhere relative to the batches.
  const std::string big = Pattern(3 * kTlsSendBatchBytes + 12345, 5);
  v1::DataFrameMeta meta;
  meta.set_token("t");
  meta.mutable_chunk()->set_job_id("job");
  auto sent = std::async(std::launch::async, [&] {
    for (int i = 0; i < 3; ++i) {
      meta.mutable_chunk()->set_block(i);
      if (absl::Status s = SendFrame(*client_, FrameType::kPush, meta, big.data(), big.size());
          !s.ok()) {
        return s;
      }
    }
    return SendFrame(*client_, FrameType::kGather, meta);
  });
  for (uint32_t i = 0; i < 3; ++i) {
    auto start = RecvFrameStart(*server_);
    ASSERT_TRUE(start.ok()) << start.status();
    ASSERT_TRUE(start->has_value());
    EXPECT_EQ((*start)->header.type, FrameType::kPush);
    EXPECT_EQ((*start)->meta.chunk().block(), i);
    ASSERT_EQ((*start)->header.payload_len, big.size());
    std::string payload(big.size(), '\0');
    ASSERT_TRUE(RecvExact(*server_, payload.data(), payload.size()).ok());
    EXPECT_TRUE(payload == big) << "frame " << i << "'s payload differs";
  }
  auto last = RecvFrameStart(*server_);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->header.type, FrameType::kGather);
  EXPECT_EQ((*last)->header.payload_len, 0u);
  ASSERT_TRUE(sent.get().ok());
}

TEST_P(DataStreamTest, ARecordReadInPartsLeavesTheRestBuffered) {
  const std::string data = Pattern(100 << 10, 6);
  iovec iov{const_cast<char*>(data.data()), data.size()};
  ASSERT_TRUE(client_->SendAll(&iov, 1).ok());
  char first = 0;
  absl::StatusOr<size_t> r = server_->RecvSome(&first, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(first, data[0]);
  // Under TLS the rest (of the first record, and the records read ahead)
  // waits in OpenSSL: a wait for the socket must not be needed to read it.
  if (tls()) {
    EXPECT_TRUE(server_->Buffered());
  }
  EXPECT_TRUE(server_->WaitReadable(absl::Now()));
  absl::StatusOr<std::string> rest = ReadInPieces(*server_, data.size() - 1, {4096, 65536});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(*rest == data.substr(1));
}

TEST_P(DataStreamTest, BothDirectionsAtOnceStayWhole) { SendBothWaysAndCheck(8 << 20); }

// The reader takes a little, then goes away with unread bytes (a reset);
// the sender's next batches fail with UNAVAILABLE, and the process lives on.
void DataStreamTest::ExpectAPeerGoneMidBatchIsUnavailable() {
  const std::string data = Pattern(32 << 20, 9);
  char some[1024];
  auto sent = std::async(std::launch::async, [&] {
    iovec iov{const_cast<char*>(data.data()), data.size()};
    return client_->SendAll(&iov, 1);
  });
  ASSERT_TRUE(server_->RecvSome(some, sizeof(some)).ok());
  server_.reset();
  linger reset{1, 0};  // close now, with a reset
  setsockopt(sockets_.server, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(sockets_.server);
  sockets_.server = -1;
  absl::Status s = sent.get();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("send"), std::string::npos) << s;
}

// This process does not ignore SIGPIPE: the streams block it around
// OpenSSL's calls.
TEST_P(DataStreamTest, APeerGoneMidBatchIsUnavailableNotASignal) {
  ASSERT_FALSE(SigpipeIgnored());
  ExpectAPeerGoneMidBatchIsUnavailable();
}

// Streams made while the process ignores SIGPIPE (as zerostate-server and
// CPython do) leave the signal mask alone: the write fails with EPIPE.
class DataStreamSigpipeIgnoredTest : public DataStreamTest {
 protected:
  void SetUp() override {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ASSERT_EQ(sigaction(SIGPIPE, &ignore, &old_), 0);
    DataStreamTest::SetUp();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    sigaction(SIGPIPE, &old_, nullptr);
  }

 private:
  struct sigaction old_ {};
};

TEST_P(DataStreamSigpipeIgnoredTest, APeerGoneMidBatchIsUnavailable) {
  ASSERT_TRUE(SigpipeIgnored());
  ExpectAPeerGoneMidBatchIsUnavailable();
}

TEST_P(DataStreamTest, TheEndOfTheStreamReadsAsZero) {
  const std::string data = Pattern(300 << 10, 10);
  iovec iov{const_cast<char*>(data.data()), data.size()};
  ASSERT_TRUE(client_->SendAll(&iov, 1).ok());
  client_->CloseSend();
  absl::StatusOr<std::string> got = ReadInPieces(*server_, data.size(), {1 << 20});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);
  char more;
  absl::StatusOr<size_t> end = server_->RecvSome(&more, 1);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, 0u);
}

// A key update every 3 records (the default is every 2^24): 2 MiB each
// way is 128 records, so 42 updates each way, each read by the other end
// (OpenSSL's message callback counts them), and every byte arrives whole.
class DataStreamKeyUpdateTest : public DataStreamTest {
 protected:
  DataStreamKeyUpdateTest() { records_per_key_ = 3; }
};

TEST_P(DataStreamKeyUpdateTest, KeysMoveOnEveryFewRecordsAndTheBytesStayWhole) {
  ASSERT_NO_FATAL_FAILURE(SendBothWaysAndCheck(2 << 20));
  constexpr uint64_t kUpdates = (2 << 20) / kTlsRecordPlaintext / 3;
  EXPECT_EQ(client_->KeyUpdatesSent(), kUpdates);
  EXPECT_EQ(server_->KeyUpdatesSent(), kUpdates);
  EXPECT_EQ(server_key_updates_.load(), static_cast<int>(kUpdates));
  EXPECT_EQ(client_key_updates_.load(), static_cast<int>(kUpdates));
}

INSTANTIATE_TEST_SUITE_P(Planes, DataStreamKeyUpdateTest, ::testing::Values(true),
                         [](const ::testing::TestParamInfo<bool>&) { return "Tls"; });

INSTANTIATE_TEST_SUITE_P(Planes, DataStreamSigpipeIgnoredTest, ::testing::Values(true),
                         [](const ::testing::TestParamInfo<bool>&) { return "Tls"; });

INSTANTIATE_TEST_SUITE_P(Planes, DataStreamTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tls" : "Plaintext";
                         });

}  // namespace
}  // namespace zerostate
