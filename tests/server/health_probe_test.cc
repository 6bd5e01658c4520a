// `zerostate health` (server/cli/health_probe.h), the Kubernetes exec probe,
// run as a process against real servers: SERVING over mutual TLS with the
// CA and a client certificate, and over plaintext; a probe without a
// client certificate, or one trusting another CA, is refused naming the
// address; a probe that chooses no transport is a usage error.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "tests/client/cluster_fixture.h"

namespace zerostate::testing {
namespace {

struct ProbeRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

ProbeRun Probe(const std::string& args) {
  ProbeRun run;
  FILE* p = popen((std::string(ZEROSTATE_CLI_PATH) + " health " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return run;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) run.output += buf;
  int status = pclose(p);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string TlsArgs(const std::string& ca, const std::string& client) {
  const TestCertificates& certs = SharedCertificates();
  std::string args = " --tls_ca=" + certs.Path(ca + ".pem");
  if (!client.empty()) {
    args +=
        " --tls_cert=" + certs.Path(client + ".pem") + " --tls_key=" + certs.Path(client + ".key");
  }
  return args + " --timeout_seconds=5";
}

TEST(HealthProbeTest, MutualTlsServerIsServingOnlyForAProbeItTrusts) {
  ASSERT_TRUE(SharedCertificates().ok()) << SharedCertificates().Log();
  ServerProcessOptions o = TestServerOptions();
  UseMutualTls(o);
  auto server = ServerProcess::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();

  ProbeRun ok = Probe(address + TlsArgs("ca", "client"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find(address + ": SERVING"), std::string::npos) << ok.output;
  // The name checked against the certificate may differ from the address
  // dialled (a pod probing itself on localhost).
  ProbeRun named = Probe("localhost:" + address.substr(address.rfind(':') + 1) +
                         TlsArgs("ca", "client") + " --tls_server_name=localhost");
  EXPECT_EQ(named.exit_code, 0) << named.output;

  for (const auto& [ca, client] :
       {std::pair{"ca", ""}, {"other_ca", "client"}, {"ca", "stranger"}}) {
    ProbeRun refused = Probe(address + TlsArgs(ca, client));
    EXPECT_EQ(refused.exit_code, 1) << ca << " " << client << ": " << refused.output;
    EXPECT_NE(refused.output.find("health check of " + address), std::string::npos)
        << refused.output;
  }
}

TEST(HealthProbeTest, PlaintextServerIsServingAndNoTransportIsAUsageError) {
  auto server = ServerProcess::Start(TestServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  ProbeRun ok = Probe((*server)->address() + " --plaintext");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  ProbeRun none = Probe((*server)->address());
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("--tls_ca"), std::string::npos) << none.output;
  ProbeRun bad = Probe((*server)->address() + " --plaintext --timeout_seconds=soon");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--timeout_seconds=soon"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace zerostate::testing
