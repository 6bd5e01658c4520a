// The data plane's TLS client (common/data_tls.h, TlsConnect and
// DataStream) against the reference implementation's server, `openssl
// s_server -rev` (it answers each line reversed) under mutual TLS 1.3:
// the handshake, records both ways, the server's view of the client's
// certificate, and a clean close_notify. (The other way, `openssl
// s_client` against the data plane's port: data_plane_tls_test.cc; ours
// against ours: data_stream_test.cc.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/data_stream.h"
#include "common/data_tls.h"
#include "common/frame_io.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/tls_contexts.h"

namespace zerostate {
namespace {

// `openssl s_server` on a free loopback port, for one connection; its
// output is read by Finish.
class OpenSslServer {
 public:
  explicit OpenSslServer(const testing::TestCertificates& certs) {
    const std::string cmd = absl::StrCat(
        "timeout 30 openssl s_server -accept 127.0.0.1:0 -naccept 1 -rev -tls1_3 -cert ",
        certs.Path("server.pem"), " -key ", certs.Path("server.key"), " -CAfile ",
        certs.Path("ca.pem"), " -Verify 1 -verify_return_error 2>&1");
    out_ = popen(cmd.c_str(), "r");
    char line[512];
    while (out_ != nullptr && fgets(line, sizeof(line), out_) != nullptr) {
      log_ += line;
      if (std::strncmp(line, "ACCEPT ", 7) == 0) {
        address_ = std::string(line + 7, std::strcspn(line + 7, "\n"));
        break;
      }
    }
  }
  ~OpenSslServer() { Finish(); }

  // "127.0.0.1:port"; "" when it did not start.
  const std::string& address() const { return address_; }
  // Waits for it to end; all it printed.
  const std::string& Finish() {
    if (out_ == nullptr) return log_;
    char line[512];
    while (fgets(line, sizeof(line), out_) != nullptr) log_ += line;
    pclose(out_);
    out_ = nullptr;
    return log_;
  }

 private:
  FILE* out_ = nullptr;
  std::string address_;
  std::string log_;
};

int ConnectTo(const std::string& address) {
  std::vector<std::string> hp = absl::StrSplit(address, ':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(hp.at(1))));
  inet_pton(AF_INET, hp.at(0).c_str(), &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(TlsInteropTest, OurClientTalksToOpenSslsServer) {
  testing::TestCertificates certs(
      absl::StrCat(::testing::TempDir(), "zerostate_tls_interop_test.", getpid()));
  ASSERT_TRUE(certs.ok()) << certs.Log();
  auto contexts = testing::MutualTlsContexts(certs, /*kernel=*/false);
  ASSERT_TRUE(contexts.ok()) << contexts.status();
  OpenSslServer server(certs);
  ASSERT_FALSE(server.address().empty()) << server.Finish();
  const int fd = ConnectTo(server.address());
  ASSERT_GE(fd, 0) << server.Finish();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  auto stream = TlsConnect(contexts->client.get(), fd, "127.0.0.1", deadline);
  ASSERT_TRUE(stream.ok()) << stream.status() << "\n" << server.Finish();
  (*stream)->SetDeadline(deadline);
  EXPECT_NE((*stream)->PeerSubject().find("zs-test-server"), std::string::npos);
  EXPECT_EQ((*stream)->Describe().rfind("TLSv1.3 TLS_AES_128_GCM_SHA256", 0), 0u)
      << (*stream)->Describe();
  // Lines of more than a record in all (s_server reads lines of up to
  // 16 KiB), then a short one: each comes back reversed.
  std::string lines, want;
  for (char c : {'a', 'b', 'c'}) {
    const std::string line = std::string(8000, c) + "z";
    lines += line + "\n";
    want += "z" + std::string(8000, c) + "\n";
  }
  lines += "hello zerostate\n";
  want += "etatsorez olleh\n";
  iovec iov{lines.data(), lines.size()};
  ASSERT_TRUE((*stream)->SendAll(&iov, 1).ok());
  std::string got(want.size(), '\0');
  absl::Status s = RecvExact(**stream, got.data(), got.size());
  ASSERT_TRUE(s.ok()) << s << "\n" << server.Finish();
  EXPECT_TRUE(got == want) << got.substr(0, 64);
  (*stream)->CloseSend();
  stream->reset();
  close(fd);
  const std::string& log = server.Finish();
  EXPECT_NE(log.find("Ciphersuite: TLS_AES_128_GCM_SHA256"), std::string::npos) << log;
  EXPECT_NE(log.find("CN = zs-test-client"), std::string::npos) << log;
  EXPECT_EQ(log.find(":error:"), std::string::npos) << log;
}

}  // namespace
}  // namespace zerostate
