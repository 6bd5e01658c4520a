// TLS and mutual TLS between the client library and real zerostate-server
// processes, with a CA, server and client certificates made by the openssl
// tool at test time: TLS works, mTLS refuses a client without a
// certificate, a plaintext client gets a clear error from a TLS server, a
// server with a bad certificate path, or with no transport chosen, refuses
// to start naming the flag, and bad client options are named.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/client/cluster_fixture.h"
#include "tests/testing/test_certificates.h"

namespace zerostate::testing {
namespace {

const TestCertificates& Certificates() {
  static const TestCertificates* certs = new TestCertificates(
      absl::StrCat(::testing::TempDir(), "zerostate_tls_certs.", getpid()));
  return *certs;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ClientTlsTest : public ::testing::Test {
 protected:
  const TestCertificates& certs = Certificates();

  void SetUp() override { ASSERT_TRUE(certs.ok()) << certs.Log(); }

  // A TLS server; mutual TLS when `mutual`. Its stderr goes to log_.
  absl::StatusOr<std::unique_ptr<ServerProcess>> StartTls(bool mutual) {
    ServerProcessOptions o = TestServerOptions();
    o.plaintext = false;
    o.args.push_back("--tls_cert=" + certs.Path("server.pem"));
    o.args.push_back("--tls_key=" + certs.Path("server.key"));
    if (mutual) o.args.push_back("--tls_client_ca=" + certs.Path("ca.pem"));
    o.stderr_path = log_;
    std::remove(log_.c_str());
    return ServerProcess::Start(o);
  }

  // Client options for TLS to `server`: the CA, and the client certificate
  // when `with_cert`.
  client::ClientOptions TlsOptions(const ServerProcess& server, bool with_cert) {
    client::ClientOptions o = TestClientOptions({server.address()});
    o.plaintext = false;
    o.tls_ca_file = certs.Path("ca.pem");
    if (with_cert) {
      o.tls_cert_file = certs.Path("client.pem");
      o.tls_key_file = certs.Path("client.key");
    }
    o.max_attempts = 1;
    o.rpc_timeout = std::chrono::milliseconds(5000);
    return o;
  }

  // Registers a job and runs a step of it through `options`.
  static absl::Status TrainOneStep(const client::ClientOptions& options) {
    auto c = client::Client::Connect(options);
    if (!c.ok()) return c.status();
    auto job = (*c)->RegisterJob(TestSpec("tls", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    if (!job.ok()) return job.status();
    const Layout& layout = (*job)->layout();
    std::vector<float> g(layout.used_elems, 0.5f), w(layout.total_elems);
    if (auto s = (*job)->Push(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32); !s.ok()) {
      return s;
    }
    if (auto s = (*job)->Step(0, 0.1f, 1.0f, false); !s.ok()) return s;
    return (*job)->Gather(1, {0, layout.total_elems}, w.data(), v1::DTYPE_FP32);
  }

  std::string log_ = absl::StrCat(::testing::TempDir(), "zerostate_tls_server.", getpid(), ".log");
};

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
}

TEST_F(ClientTlsTest, TlsServerServesAClientThatTrustsItsCa) {
  auto server = StartTls(/*mutual=*/false);
  ASSERT_TRUE(server.ok()) << server.status() << Slurp(log_);
  EXPECT_TRUE(TrainOneStep(TlsOptions(**server, /*with_cert=*/false)).ok());
  EXPECT_EQ(Slurp(log_).find("--plaintext"), std::string::npos) << "no plaintext warning on TLS";
  // The data plane speaks TLS too (tests/client/data_plane_tls_test.cc).
  EXPECT_FALSE((*server)->data_address().empty()) << "no data plane under TLS";
}

TEST_F(ClientTlsTest, ClientThatTrustsAnotherCaIsRefused) {
  auto server = StartTls(/*mutual=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions o = TlsOptions(**server, false);
  o.tls_ca_file = certs.Path("other_ca.pem");
  ExpectError(TrainOneStep(o), absl::StatusCode::kUnavailable,
              "RegisterJob to " + (*server)->address());
}

TEST_F(ClientTlsTest, MutualTlsServesAClientWithACertificateAndRefusesOneWithout) {
  auto server = StartTls(/*mutual=*/true);
  ASSERT_TRUE(server.ok()) << server.status() << Slurp(log_);
  EXPECT_TRUE(TrainOneStep(TlsOptions(**server, /*with_cert=*/true)).ok());
  ExpectError(TrainOneStep(TlsOptions(**server, /*with_cert=*/false)),
              absl::StatusCode::kUnavailable, "RegisterJob to " + (*server)->address());
}

TEST_F(ClientTlsTest, PlaintextClientAgainstTlsServerGetsAClearError) {
  auto server = StartTls(/*mutual=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions o = TestClientOptions({(*server)->address()});
  o.max_attempts = 1;
  o.rpc_timeout = std::chrono::milliseconds(5000);
  absl::Status s = TrainOneStep(o);
  ExpectError(s, absl::StatusCode::kUnavailable, "RegisterJob to " + (*server)->address());
  ExpectError(s, absl::StatusCode::kUnavailable, "TLS");
}

TEST_F(ClientTlsTest, ServerWithABadCertificatePathRefusesToStartNamingTheFlag) {
  ServerProcessOptions o = TestServerOptions();
  o.plaintext = false;
  o.args.push_back("--tls_cert=/nonexistent/zerostate/server.pem");
  o.args.push_back("--tls_key=" + certs.Path("server.key"));
  o.stderr_path = log_;
  std::remove(log_.c_str());
  auto server = ServerProcess::Start(o);
  ExpectError(server.status(), absl::StatusCode::kInternal, "exit status 1");
  EXPECT_NE(Slurp(log_).find("--tls_cert: cannot read '/nonexistent/zerostate/server.pem'"),
            std::string::npos)
      << Slurp(log_);
}

TEST_F(ClientTlsTest, ServerRefusesAKeyOfAnotherCertificate) {
  ServerProcessOptions o = TestServerOptions();
  o.plaintext = false;
  o.args.push_back("--tls_cert=" + certs.Path("server.pem"));
  o.args.push_back("--tls_key=" + certs.Path("client.key"));
  o.stderr_path = log_;
  std::remove(log_.c_str());
  EXPECT_FALSE(ServerProcess::Start(o).ok());
  EXPECT_NE(Slurp(log_).find("--tls_key: does not match the certificate of --tls_cert"),
            std::string::npos)
      << Slurp(log_);
}

TEST_F(ClientTlsTest, ServerWithoutTlsOrPlaintextRefusesToStartNamingTheFlags) {
  ServerProcessOptions o = TestServerOptions();
  o.plaintext = false;
  o.stderr_path = log_;
  std::remove(log_.c_str());
  EXPECT_FALSE(ServerProcess::Start(o).ok());
  const std::string log = Slurp(log_);
  EXPECT_NE(log.find("no transport security chosen"), std::string::npos) << log;
  EXPECT_NE(log.find("--tls_cert and --tls_key"), std::string::npos) << log;
  EXPECT_NE(log.find("--plaintext"), std::string::npos) << log;
}

TEST_F(ClientTlsTest, BadClientTransportOptionsAreNamed) {
  client::ClientOptions o = TestClientOptions({"127.0.0.1:1"});
  struct Case {
    std::function<void(client::ClientOptions&)> change;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.plaintext = false; }, "tls_ca_file: no transport security chosen"},
      {[&](auto& c) { c.tls_ca_file = certs.Path("ca.pem"); }, "plaintext: set together"},
      {[](auto& c) {
         c.plaintext = false;
         c.tls_ca_file = "/nonexistent/ca.pem";
       },
       "tls_ca_file: cannot read '/nonexistent/ca.pem'"},
      {[&](auto& c) {
         c.plaintext = false;
         c.tls_ca_file = certs.Path("ca.pem");
         c.tls_cert_file = certs.Path("client.pem");
       },
       "tls_key_file: tls_cert_file and tls_key_file go together"},
      {[&](auto& c) {
         c.plaintext = false;
         c.tls_cert_file = certs.Path("client.pem");
         c.tls_key_file = certs.Path("client.key");
       },
       "tls_ca_file: required with"},
      {[](auto& c) { c.job_token = "too-short"; }, "job_token: must be 32 to 256"},
  };
  for (const Case& c : cases) {
    client::ClientOptions bad = o;
    c.change(bad);
    ExpectError(client::Client::Connect(bad).status(), absl::StatusCode::kInvalidArgument,
                c.needle);
  }
}

}  // namespace
}  // namespace zerostate::testing
