// The TCP data plane under mutual TLS, against real zerostate-server
// processes with certificates made at test time: a client whose
// certificate the CA did not sign (another CA's, an expired one, or none)
// is refused at the handshake on both planes and changes nothing; a
// plaintext client on the TLS data port and a TLS client on a plaintext
// one get nowhere; renewed certificate files serve new connections while
// live ones keep theirs, under load, with every push applied exactly once;
// `openssl s_client` completes the handshake and gets a malformed frame
// refused; a push whose records are cut, altered, follow a close_notify or
// an alert closes the connection and changes nothing.
// (Malformed frames, wrong tokens and cuts under TLS: data_plane_test.cc
// and network_fault_test.cc run their cases under TLS too.)
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "client/channel_credentials.h"
#include "client/data_conn.h"
#include "common/data_tls.h"
#include "common/frame_io.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/data_plane_helpers.h"
#include "tests/client/reference_model.h"
#include "tests/testing/frame_cases.h"
#include "tests/testing/pattern.h"
#include "tests/testing/tls_peer.h"

namespace zerostate::testing {
namespace {

namespace fs = std::filesystem;

class DataPlaneTlsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << certs_.Log(); }

  // A server under mutual TLS whose certificate files are copies (so a
  // test may renew them), with a legitimate client and job "tls".
  void StartServer(bool tls = true, bool ktls = true) {
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--metrics_listen=127.0.0.1:0");
    if (!ktls) o.args.push_back("--data_ktls=false");
    if (tls) {
      fs::copy_file(certs_.Path("server.pem"), Served("server.pem"),
                    fs::copy_options::overwrite_existing);
      fs::copy_file(certs_.Path("server.key"), Served("server.key"),
                    fs::copy_options::overwrite_existing);
      o.plaintext = false;
      o.args.push_back("--tls_cert=" + Served("server.pem"));
      o.args.push_back("--tls_key=" + Served("server.key"));
      o.args.push_back("--tls_client_ca=" + certs_.Path("ca.pem"));
    }
    o.stderr_path = log_;
    auto server = ServerProcess::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_FALSE(server_->data_address().empty());
    client::ClientOptions options = TestClientOptions({server_->address()});
    if (tls) UseMutualTls(options);
    options.data_ktls = ktls;
    options.data_shm = false;  // TLS on TCP (this host would use shared memory)
    auto c = client::Client::Connect(options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    auto job = client_->RegisterJob(TestSpec("tls", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
  }

  std::string Served(const std::string& name) const {
    return absl::StrCat(certs_.dir(), "/served.", getpid(), ".", name);
  }

  // A raw data plane connection presenting certificate `name` ("" none;
  // "plaintext": no TLS at all), trusting servers `ca` signed.
  absl::StatusOr<std::unique_ptr<client::DataConn>> Connect(const std::string& name,
                                                            const std::string& ca = "ca") {
    std::shared_ptr<SSL_CTX> tls;
    if (name != "plaintext") {
      client::ClientOptions o = TestClientOptions({});
      UseMutualTls(o, name);
      o.tls_ca_file = certs_.Path(ca + ".pem");
      auto ctx = client::DataTlsContextFor(o);
      if (!ctx.ok()) return ctx.status();
      tls = *std::move(ctx);
    }
    client::DataConnPool pool(server_->data_address(), 0, tls);
    auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
    if (conn.ok()) (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(10));
    return conn;
  }

  // Replaces the served certificate by `name`'s, the key first (a reader
  // may see the new key with the old certificate meanwhile).
  void Renew(const std::string& name) {
    fs::copy_file(certs_.Path(name + ".key"), Served("server.key.new"));
    fs::copy_file(certs_.Path(name + ".pem"), Served("server.pem.new"));
    fs::rename(Served("server.key.new"), Served("server.key"));
    fs::rename(Served("server.pem.new"), Served("server.pem"));
  }

  // Sends a valid push of job "tls" on `conn` and returns its answer.
  static absl::StatusOr<v1::DataFrameMeta> PushOn(client::DataConn& conn) {
    if (!Write(conn, PushFrame(PushFields("tls"), kTestJobToken, kPayload))) {
      return absl::UnavailableError("the connection broke while sending");
    }
    auto reply = RecvFrameStart(conn.stream());
    if (!reply.ok()) return reply.status();
    if (!reply->has_value()) return absl::UnavailableError("closed without an answer");
    if ((*reply)->header.type != FrameType::kPushAck) {
      return absl::DataLossError(absl::StrCat(
          "got a ", FrameTypeName(static_cast<uint8_t>((*reply)->header.type)), " frame"));
    }
    return (*reply)->meta;
  }

  // A raw OpenSSL client (tls_peer.h) handshaken with the data plane as
  // "client", on a TCP connection `conn` holds.
  absl::StatusOr<std::unique_ptr<TlsPeer>> PeerOn(std::unique_ptr<client::DataConn>* conn) {
    client::ClientOptions o = TestClientOptions({});
    UseMutualTls(o);
    auto ctx = client::DataTlsContextFor(o);
    if (!ctx.ok()) return ctx.status();
    tls_peer_ctx_ = *std::move(ctx);
    client::DataConnPool pool(server_->data_address(), 0, nullptr);  // TCP only
    auto c = pool.Acquire(absl::Now() + absl::Seconds(10));
    if (!c.ok()) return c.status();
    *conn = *std::move(c);
    return TlsPeer::Connect(tls_peer_ctx_.get(), (*conn)->fd(), absl::Now() + absl::Seconds(10));
  }

  std::string Log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  const TestCertificates& certs_ = SharedCertificates();
  const std::string log_ =
      absl::StrCat(::testing::TempDir(), "zerostate_data_tls.", getpid(), ".log");
  std::unique_ptr<ServerProcess> server_;
  std::shared_ptr<SSL_CTX> tls_peer_ctx_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<client::JobClient> job_;
};

TEST_F(DataPlaneTlsTest, ClientWithACertificateTheCaSignedIsServedOverTls) {
  StartServer();
  auto conn = Connect("client");
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_TRUE((*conn)->stream().tls());
  EXPECT_NE((*conn)->stream().PeerSubject().find("zs-test-server"), std::string::npos);
  auto ack = PushOn(**conn);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->code(), 0) << ack->message();
  // The server's log names the suite and where the records are done.
  EXPECT_NE(Log().find("data plane TLS: first connection: TLSv1.3 TLS_AES_"), std::string::npos)
      << Log();
}

// OpenSSL's userspace records forced on both ends (what a kernel without
// the tls module gets anyway): the job's pushes and gathers are served by
// the data plane, and the server says how its records are done.
TEST_F(DataPlaneTlsTest, UserspaceRecordsForcedOnBothEndsServeTheJob) {
  StartServer(/*tls=*/true, /*ktls=*/false);
  ExpectJobUntouched(*job_);
  auto page = ScrapeMetrics(server_->metrics_address());
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_GT(MetricValue(*page, "zerostate_rpc_duration_seconds_count{method=\"DataPush\"}"), 0);
  EXPECT_NE(Log().find("records in OpenSSL (userspace)"), std::string::npos) << Log();
}

// Refused at the handshake: the server reads nothing of the client as a
// frame. Under TLS 1.3 the client learns it at its first read (the
// server's alert), and the same client is refused on the gRPC port.
TEST_F(DataPlaneTlsTest, ClientCertificateTheCaDidNotSignIsRefusedOnBothPlanes) {
  StartServer();
  for (const std::string name : {"stranger", "expired", ""}) {
    SCOPED_TRACE(name.empty() ? "no certificate" : name);
    auto conn = Connect(name);
    if (conn.ok()) {
      auto ack = PushOn(**conn);
      EXPECT_FALSE(ack.ok()) << "served: " << ack->DebugString();
      EXPECT_TRUE(absl::IsUnavailable(ack.status())) << ack.status();
    }
    client::ClientOptions o = TestClientOptions({server_->address()});
    UseMutualTls(o, name);
    o.max_attempts = 1;
    o.rpc_timeout = std::chrono::milliseconds(5000);
    auto c = client::Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    auto attached = (*c)->AttachJob("tls");
    EXPECT_TRUE(absl::IsUnavailable(attached.status())) << attached.status();
  }
  ExpectJobUntouched(*job_);
}

TEST_F(DataPlaneTlsTest, PlaintextClientOnTheTlsDataPortGetsNoAnswer) {
  StartServer();
  auto conn = Connect("plaintext");
  ASSERT_TRUE(conn.ok()) << conn.status();
  auto ack = PushOn(**conn);
  EXPECT_FALSE(ack.ok()) << "a plaintext frame was served: " << ack->DebugString();
  ExpectJobUntouched(*job_);
}

TEST_F(DataPlaneTlsTest, TlsClientOnAPlaintextDataPortFailsItsHandshake) {
  StartServer(/*tls=*/false);
  auto conn = Connect("client");
  ASSERT_FALSE(conn.ok()) << "a TLS handshake succeeded with a plaintext server";
  EXPECT_TRUE(absl::IsUnavailable(conn.status())) << conn.status();
  EXPECT_NE(conn.status().message().find("TLS handshake"), std::string::npos) << conn.status();
  EXPECT_NE(conn.status().message().find(server_->data_address()), std::string::npos)
      << conn.status();
}

// Steps run while the server's certificate files are replaced by another
// certificate of the same CA: a connection opened before keeps serving
// with the old certificate, one opened after gets the new one, and the
// weights after every step equal the reference's bit for bit (a push lost
// or applied twice would change them).
TEST_F(DataPlaneTlsTest, RenewedCertificateServesNewConnectionsWhileLiveOnesKeepTheirs) {
  StartServer();
  auto before = Connect("client");
  ASSERT_TRUE(before.ok()) << before.status();
  ReferenceModel ref(job_->spec());
  const Layout& layout = ref.layout();
  std::vector<float> got(layout.total_elems);
  constexpr uint64_t kSteps = 6;
  for (uint64_t step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> grads = {NodeGradient(layout, 0, step)};
    // Two halves at once: more connections, more frames in flight.
    const uint64_t half = layout.used_elems / 2;
    std::vector<client::Ticket> pushes = {
        job_->PushAsync(step, 0, {0, half}, grads[0].data(), v1::DTYPE_FP32),
        job_->PushAsync(step, 0, {half, layout.used_elems}, grads[0].data() + half,
                        v1::DTYPE_FP32)};
    if (step == 2) Renew("server2");  // while the pushes are in flight
    for (auto& t : pushes) ASSERT_TRUE(t.Wait().ok()) << "step " << step << ": " << t.Wait();
    ASSERT_TRUE(job_->Step(step, 0.01f, 1.0f, false).ok());
    ref.Step(step, grads, 0.01f, 1.0f);
    ASSERT_TRUE(job_->Gather(step + 1, {0, got.size()}, got.data(), v1::DTYPE_FP32).ok());
    ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(),
                       absl::StrCat("weights after step ", step));
  }
  auto version = job_->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, kSteps);
  // The files are looked at no more than once a second: a new connection
  // after that gets the new certificate.
  absl::SleepFor(absl::Milliseconds(1100));
  auto after = Connect("client");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE((*after)->stream().PeerSubject().find("zs-test-server2"), std::string::npos)
      << (*after)->stream().PeerSubject();
  EXPECT_EQ((*before)->stream().PeerSubject().find("zs-test-server2"), std::string::npos)
      << (*before)->stream().PeerSubject();
  // The live connection still serves (a push of a step already stepped is
  // refused by the job, not by TLS: the answer arrives).
  auto ack = PushOn(**before);
  EXPECT_TRUE(ack.ok()) << ack.status();
  EXPECT_NE(Log().find("certificate files reloaded"), std::string::npos) << Log();
}

// A certificate of another CA: clients that trust only that CA are served
// on both planes once the server has looked at its files again (gRPC's
// file watcher and the data plane's look, each about once a second).
TEST_F(DataPlaneTlsTest, CertificateRenewedOnDiskServesNewConnectionsOnBothPlanes) {
  StartServer();
  auto before = Connect("client", "other_ca");
  EXPECT_FALSE(before.ok()) << "a client trusting another CA was served";
  Renew("server_other");
  client::ClientOptions o = TestClientOptions({server_->address()});
  UseMutualTls(o);
  o.tls_ca_file = certs_.Path("other_ca.pem");
  o.max_attempts = 1;
  o.rpc_timeout = std::chrono::milliseconds(2000);
  absl::Status grpc_plane = absl::UnknownError("not tried");
  absl::Status data_plane = absl::UnknownError("not tried");
  // Polls (the test's timeout is the backstop): the reload is asynchronous.
  for (int i = 0; i < 200 && (!grpc_plane.ok() || !data_plane.ok()); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    if (!grpc_plane.ok()) {
      auto c = client::Client::Connect(o);
      grpc_plane = c.ok() ? (*c)->AttachJob("tls").status() : c.status();
    }
    if (!data_plane.ok()) data_plane = Connect("client", "other_ca").status();
  }
  EXPECT_TRUE(grpc_plane.ok()) << grpc_plane;
  EXPECT_TRUE(data_plane.ok()) << data_plane;
}

// A renewal that does not load (a key of another certificate) keeps the
// last good certificate, and the log says why.
TEST_F(DataPlaneTlsTest, RenewalThatDoesNotLoadKeepsThePreviousCertificate) {
  StartServer();
  fs::copy_file(certs_.Path("client.key"), Served("server.key"),
                fs::copy_options::overwrite_existing);
  absl::SleepFor(absl::Milliseconds(1100));
  auto conn = Connect("client");
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_NE((*conn)->stream().PeerSubject().find("zs-test-server"), std::string::npos);
  auto ack = PushOn(**conn);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->code(), 0) << ack->message();
  EXPECT_NE(Log().find("do not load; new connections keep the previous ones"), std::string::npos)
      << Log();
}

// The reference implementation's client completes the handshake with the
// data plane (mutual TLS, TLS 1.3), sends a frame with a bad magic and
// reads the server's ERROR frame naming it, then the server's end.
TEST_F(DataPlaneTlsTest, OpenSslClientIsServedTheHandshakeThenARefusedFrame) {
  StartServer();
  const std::string good = PushFrame(PushFields("tls"), kTestJobToken, kPayload);
  const BadFrame bad = BadFrames(good)[0];
  const std::string in = Served("s_client.in");
  const std::string out = Served("s_client.out");
  std::ofstream(in, std::ios::binary) << bad.bytes;
  const std::string cmd = absl::StrCat(
      "timeout 20 openssl s_client -quiet -tls1_3 -verify_return_error -verify_ip 127.0.0.1",
      " -connect ", server_->data_address(), " -CAfile ", certs_.Path("ca.pem"), " -cert ",
      certs_.Path("client.pem"), " -key ", certs_.Path("client.key"), " <", in, " >", out,
      " 2>", out, ".err");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream answer(out, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(answer)), std::istreambuf_iterator<char>());
  EXPECT_NE(got.find(bad.error), std::string::npos) << "s_client read: " << got;
  ExpectJobUntouched(*job_);
}

// A valid push sealed by a raw OpenSSL client, then delivered cut short,
// with its tag altered, half of it after a close_notify, or half of it
// followed by an alert: the server never applies it, and ends the
// connection (after a close_notify mid-frame, with an ERROR frame naming
// the truncated frame). The job is then as if nothing had come.
TEST_F(DataPlaneTlsTest, TamperedRecordsCloseTheConnectionAndChangeNothing) {
  StartServer();
  const std::string frame = PushFrame(PushFields("tls"), kTestJobToken, kPayload);
  const std::string half = frame.substr(0, frame.size() / 2);
  const std::string rest = frame.substr(half.size());
  const struct {
    const char* name;
    std::string (*wire)(TlsPeer&, const std::string&, const std::string&);
  } cases[] = {
      {"truncated record",
       [](TlsPeer& p, const std::string& a, const std::string& b) {
         p.Write(a + b);
         std::string w = p.Take();
         return w.substr(0, w.size() - 5);
       }},
      {"bad tag",
       [](TlsPeer& p, const std::string& a, const std::string& b) {
         p.Write(a + b);
         std::string w = p.Take();
         w.back() ^= 1;
         return w;
       }},
      {"record after close_notify",
       [](TlsPeer& p, const std::string& a, const std::string& b) {
         p.Write(a);
         p.CloseNotify();
         p.Write(b);
         return p.Take();
       }},
      {"alert mid-stream",
       [](TlsPeer& p, const std::string& a, const std::string& b) {
         p.Write(a);
         p.Open(std::string("\x17\x03\x03\x00\x20", 5) + Pattern(32, 1));  // seals an alert
         p.Write(b);
         return p.Take();
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<client::DataConn> conn;
    auto peer = PeerOn(&conn);
    ASSERT_TRUE(peer.ok()) << peer.status();
    const std::string wire = c.wire(**peer, half, rest);
    ASSERT_EQ(send(conn->fd(), wire.data(), wire.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(wire.size()));
    shutdown(conn->fd(), SHUT_WR);
    // Whatever the server sends back, then its end (the socket has the
    // peer's 10 s timeout: a server that kept the connection fails here).
    std::string back;
    char buf[4096];
    ssize_t n;
    while ((n = recv(conn->fd(), buf, sizeof(buf), 0)) > 0) back.append(buf, n);
    EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "the server kept the connection: " << errno;
    const std::string answer = (*peer)->Open(back);
    if (std::string(c.name) == "record after close_notify") {
      EXPECT_NE(answer.find("truncated frame"), std::string::npos) << answer;
    } else {
      EXPECT_EQ(answer, "") << "the server answered a frame it did not get whole";
    }
  }
  ExpectJobUntouched(*job_);
}

}  // namespace
}  // namespace zerostate::testing
