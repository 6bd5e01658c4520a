#include "tests/testing/server_process_c.h"

#include <cstdio>
#include <memory>

#include "tests/testing/server_process.h"

struct zs_test_server {
  std::unique_ptr<zerostate::testing::ServerProcess> process;
};

extern "C" {

zs_test_server* zs_test_server_start(const char* binary, const char* const* args) {
  zerostate::testing::ServerProcessOptions options;
  options.binary = binary != nullptr ? binary : "";
  for (; args != nullptr && *args != nullptr; ++args) options.args.push_back(*args);
  auto process = zerostate::testing::ServerProcess::Start(options);
  if (!process.ok()) {
    fprintf(stderr, "zs_test_server_start: %s\n", process.status().ToString().c_str());
    return nullptr;
  }
  return new zs_test_server{*std::move(process)};
}

const char* zs_test_server_address(const zs_test_server* server) {
  return server->process->address().c_str();
}

int zs_test_server_stop(zs_test_server* server) {
  absl::Status s = server->process->Stop();
  if (s.ok()) return 0;
  fprintf(stderr, "zs_test_server_stop: %s\n", s.ToString().c_str());
  return -1;
}

void zs_test_server_free(zs_test_server* server) { delete server; }

}  // extern "C"
