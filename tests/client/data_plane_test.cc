// The servers' TCP data plane (server/dataplane/data_plane.h) from a raw socket and
// through the client, against a real zerostate-server process: malformed
// frames get an ERROR frame naming the problem, then the connection
// closes, and the job is left as it was; a push cut mid-payload leaves
// nothing behind; a wrong token gets the same
// answer whether or not the job exists; the client's pushes and gathers
// are served (and counted) by the data plane. Each case runs twice: in
// plaintext, and under mutual TLS on both ports (the frames inside TLS
// records).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "client/channel_credentials.h"
#include "client/data_conn.h"
#include "common/frame_io.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/data_plane_helpers.h"
#include "tests/client/reference_model.h"
#include "tests/testing/frame_cases.h"

namespace zerostate::testing {
namespace {

// The parameter: mutual TLS on both planes (else plaintext).
class DataPlaneTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--metrics_listen=127.0.0.1:0");
    client::ClientOptions options = TestClientOptions({});
    options.data_shm = false;  // the TCP plane (shm_plane_test.cc: the same-host one)
    if (GetParam()) {
      ASSERT_TRUE(SharedCertificates().ok()) << SharedCertificates().Log();
      UseMutualTls(o);
      UseMutualTls(options);
    }
    auto tls = client::DataTlsContextFor(options);
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = *std::move(tls);
    auto server = ServerProcess::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_FALSE(server_->data_address().empty()) << "the server printed no data plane address";
    options.servers = {server_->address()};
    auto c = client::Client::Connect(options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    auto job = client_->RegisterJob(TestSpec("dp", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
  }

  // A raw connection to the data plane.
  std::unique_ptr<client::DataConn> Connect() {
    client::DataConnPool pool(server_->data_address(), 0, tls_);
    auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) return nullptr;
    (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(10));
    return *std::move(conn);
  }

  // The next frame the server sends on `conn` (which must not be closed).
  FrameStart Reply(client::DataConn& conn) {
    absl::StatusOr<std::optional<FrameStart>> f = RecvFrameStart(conn.stream());
    EXPECT_TRUE(f.ok() && f->has_value()) << (f.ok() ? "closed" : f.status().ToString());
    return f.ok() && f->has_value() ? **f : FrameStart{};
  }

  std::shared_ptr<SSL_CTX> tls_;  // null in plaintext
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<client::JobClient> job_;
};

TEST_P(DataPlaneTest, EachMalformedFrameIsAnsweredNamingItThenClosedAndChangesNothing) {
  const std::string good = PushFrame(PushFields("dp"), kTestJobToken, kPayload);
  for (const BadFrame& bad : BadFrames(good)) {
    SCOPED_TRACE(bad.name);
    std::unique_ptr<client::DataConn> conn = Connect();
    ASSERT_NE(conn, nullptr);
    ASSERT_TRUE(Write(*conn, bad.bytes));
    conn->stream().CloseSend();  // a truncated frame ends here
    FrameStart reply = Reply(*conn);
    EXPECT_EQ(reply.header.type, FrameType::kError);
    EXPECT_EQ(reply.meta.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_NE(reply.meta.message().find(bad.error), std::string::npos) << reply.meta.message();
    EXPECT_NE(reply.meta.incarnation(), 0u);
    absl::StatusOr<std::optional<FrameStart>> after = RecvFrameStart(conn->stream());
    EXPECT_TRUE(after.ok() && !after->has_value()) << "the server kept the connection open";
  }
  ExpectJobUntouched(*job_);
}

TEST_P(DataPlaneTest, WrongTokenGetsTheSameAnswerForAnExistingAndAnUnknownJob) {
  const std::string wrong = "wrong-token-0123456789abcdef0123456789abcdef";
  std::unique_ptr<client::DataConn> conn = Connect();
  ASSERT_NE(conn, nullptr);
  std::vector<v1::DataFrameMeta> acks;
  for (const char* job_id : {"dp", "no-such-job"}) {
    std::string frame = PushFrame(PushFields(job_id), wrong, kPayload);
    ASSERT_TRUE(Write(*conn, frame));
    FrameStart reply = Reply(*conn);
    EXPECT_EQ(reply.header.type, FrameType::kPushAck);
    acks.push_back(reply.meta);
  }
  EXPECT_EQ(acks[0].code(), static_cast<int>(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(acks[0].SerializeAsString(), acks[1].SerializeAsString());
  // A gather with the wrong token ends at once with the same answer.
  v1::DataFrameMeta gather;
  gather.set_token(wrong);
  gather.mutable_gather()->set_job_id("dp");
  gather.mutable_gather()->set_end(10);
  ASSERT_TRUE(SendFrame(conn->stream(), FrameType::kGather, gather).ok());
  FrameStart end = Reply(*conn);
  EXPECT_EQ(end.header.type, FrameType::kGatherEnd);
  EXPECT_EQ(end.meta.code(), acks[0].code());
  EXPECT_EQ(end.meta.bytes(), 0u);
  // The connection still serves a well-formed frame with the right token.
  std::string frame = PushFrame(PushFields("dp"), kTestJobToken, kPayload);
  ASSERT_TRUE(Write(*conn, frame));
  FrameStart ok = Reply(*conn);
  EXPECT_EQ(ok.meta.code(), 0) << ok.meta.message();
  EXPECT_FALSE(ok.meta.duplicate());
}

// The server folds a push, or sends a gather piece, on a second thread
// while it reads the next frame or fills the next piece: frames sent back
// to back are still answered in their order, a gather only after the
// pushes before it are acknowledged, and a resent push exactly once.
TEST_P(DataPlaneTest, FramesSentBackToBackAreAnsweredInOrder) {
  std::unique_ptr<client::DataConn> conn = Connect();
  ASSERT_NE(conn, nullptr);
  std::string frames;
  for (int i = 0; i < 3; ++i) frames += PushFrame(PushFields("dp"), kTestJobToken, kPayload);
  ASSERT_TRUE(Write(*conn, frames));
  v1::DataFrameMeta gather;
  gather.set_token(kTestJobToken);
  gather.mutable_gather()->set_job_id("dp");
  gather.mutable_gather()->set_dtype(v1::DTYPE_FP32);
  gather.mutable_gather()->set_end(16);
  ASSERT_TRUE(SendFrame(conn->stream(), FrameType::kGather, gather).ok());
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(absl::StrCat("push ", i));
    FrameStart ack = Reply(*conn);
    ASSERT_EQ(ack.header.type, FrameType::kPushAck);
    EXPECT_EQ(ack.meta.code(), 0) << ack.meta.message();
    EXPECT_EQ(ack.meta.duplicate(), i > 0);
  }
  FrameStart piece = Reply(*conn);
  ASSERT_EQ(piece.header.type, FrameType::kGatherPiece);
  ASSERT_EQ(piece.header.payload_len, 16u * 4);
  std::string weights(piece.header.payload_len, '\0');
  ASSERT_TRUE(RecvExact(conn->stream(), weights.data(), weights.size()).ok());
  FrameStart end = Reply(*conn);
  ASSERT_EQ(end.header.type, FrameType::kGatherEnd);
  EXPECT_EQ(end.meta.code(), 0) << end.meta.message();
  EXPECT_EQ(end.meta.bytes(), 16u * 4);
}

// Node 0's fp32 payload is received straight into the block's sum. A
// retry of a frame whose payload is still arriving on another connection
// waits for that attempt to end; when the connection breaks mid-payload,
// the range is free again and the retry is applied, exactly once.
TEST_P(DataPlaneTest, PushCutMidPayloadIsGivenBackAndItsRetryApplied) {
  const std::string frame = PushFrame(PushFields("dp"), kTestJobToken, kPayload);
  std::unique_ptr<client::DataConn> cut = Connect();
  ASSERT_NE(cut, nullptr);
  const size_t partial = frame.size() - kPayload.size() / 2;
  ASSERT_TRUE(Write(*cut, frame.substr(0, partial)));
  absl::SleepFor(absl::Milliseconds(300));  // the server reads the frame's start and waits

  std::unique_ptr<client::DataConn> retry = Connect();
  ASSERT_NE(retry, nullptr);
  auto send_retry = [&] {
    EXPECT_TRUE(Write(*retry, frame));
  };
  send_retry();            // waits on the server for the first attempt
  cut.reset();             // which breaks mid-payload
  v1::DataFrameMeta applied = Reply(*retry).meta;
  EXPECT_EQ(applied.code(), 0) << applied.message();
  EXPECT_FALSE(applied.duplicate());
  send_retry();
  v1::DataFrameMeta again = Reply(*retry).meta;
  EXPECT_EQ(again.code(), 0) << again.message();
  EXPECT_TRUE(again.duplicate());
}

TEST_P(DataPlaneTest, ClientPushAndGatherAreServedByTheDataPlane) {
  ExpectJobUntouched(*job_);
  auto metrics = ScrapeMetrics(server_->metrics_address());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(metrics->find("method=\"DataPush\""), std::string::npos);
  EXPECT_NE(metrics->find("method=\"DataGather\""), std::string::npos);
  EXPECT_EQ(metrics->find("method=\"PushGradients\""), std::string::npos)
      << "a push went over gRPC";
}

INSTANTIATE_TEST_SUITE_P(Planes, DataPlaneTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "MutualTls" : "Plaintext"; });

// A bad --data_listen stops the server at start, naming the flag.
TEST(DataListenTest, BadAddressIsRefusedNamingTheFlag) {
  auto busy = ServerProcess::Start(TestServerOptions());  // its gRPC port is taken
  ASSERT_TRUE(busy.ok()) << busy.status();
  const std::string log = absl::StrCat(::testing::TempDir(), "zerostate_data_listen.", getpid());
  for (const std::string& flag :
       {std::string("nonsense"), std::string("127.0.0.1:99999"), (*busy)->address()}) {
    SCOPED_TRACE(flag);
    std::remove(log.c_str());
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--data_listen=" + flag);
    o.stderr_path = log;
    EXPECT_FALSE(ServerProcess::Start(o).ok());
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("data_listen: "), std::string::npos) << text;
    EXPECT_NE(text.find(flag), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace zerostate::testing
