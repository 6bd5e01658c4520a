// StateServer::Start refuses options out of range before it starts
// anything, with an error that names the flag and the value.
#include <gtest/gtest.h>

#include <string>

#include "server/state_server.h"

namespace zerostate::server {
namespace {

ServerOptions Options() {
  ServerOptions opt;
  opt.listen = "127.0.0.1:0";
  opt.metrics_listen = "";
  opt.tls.plaintext = true;
  opt.data_listen = "off";
  opt.ram_budget_bytes = 1 << 20;
  return opt;
}

TEST(ServerOptionsTest, SpeculationNiceOutOfRangeIsRefusedNamingIt) {
  for (int nice : {-1, 20}) {
    ServerOptions opt = Options();
    opt.speculation_nice = nice;
    auto server = StateServer::Start(opt);
    ASSERT_FALSE(server.ok()) << nice << " was accepted";
    EXPECT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
    EXPECT_NE(server.status().message().find("--speculation_nice: " + std::to_string(nice)),
              std::string::npos)
        << server.status();
  }
  ServerOptions opt = Options();
  opt.speculation_nice = 19;
  auto server = StateServer::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
}

}  // namespace
}  // namespace zerostate::server
