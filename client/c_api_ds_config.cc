// zs_parse_ds_config (client/zerostate_c.h): the worker's ds_config.json
// mapping (worker/ds_config.h), for trainers that load the C API, so that
// both read a DeepSpeed config by the same rules. Built into
// libzerostate_client.so only.
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_join.h"
#include "client/zerostate_c.h"
#include "google/protobuf/util/json_util.h"
#include "worker/ds_config.h"

namespace {

char* Copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" int zs_parse_ds_config(const char* json, char** train_json, char** warnings,
                                  char** error) {
  auto loaded = zerostate::worker::ParseDeepSpeedConfig(json != nullptr ? json : "");
  if (!loaded.ok()) {
    if (error != nullptr) *error = Copy(std::string(loaded.status().message()));
    return static_cast<int>(loaded.status().code());
  }
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(loaded->config.train(), &out, options);
  *train_json = Copy(out);
  *warnings = Copy(absl::StrJoin(loaded->warnings, "\n"));
  if (error != nullptr) *error = nullptr;
  return 0;
}
