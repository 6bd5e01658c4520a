// A DeepSpeed-style ds_config.json: parsed as LoadConfigFile parses a
// *.json config, then normalized as the worker does for a few world sizes.
#include <string>

#include "quiet_logs.h"
#include "worker/ds_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate::worker;
  auto loaded = ParseDeepSpeedConfig(std::string(reinterpret_cast<const char*>(data), size));
  if (!loaded.ok()) return 0;
  for (uint32_t world : {1u, 2u, 8u}) {
    auto normalized = NormalizeConfig(loaded->config, world);
    if (normalized.ok()) (void)RendezvousScope(*normalized);
  }
  return 0;
}
