// A worker config file in protobuf text format: parsed as LoadConfigFile
// parses a *.textproto, then normalized as the worker does for a few
// world sizes.
#include <string>

#include "quiet_logs.h"
#include "worker/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate::worker;
  auto config = ParseTextConfig(std::string(reinterpret_cast<const char*>(data), size));
  if (!config.ok()) return 0;
  for (uint32_t world : {0u, 1u, 3u, 8u}) {
    auto normalized = NormalizeConfig(*config, world);
    if (normalized.ok()) (void)RendezvousScope(*normalized);
  }
  return 0;
}
