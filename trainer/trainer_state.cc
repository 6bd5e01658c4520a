#include "trainer/trainer_state.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zerostate::trainer {
namespace {

constexpr absl::string_view kFormat = "loss_scaler/1";

absl::Status Malformed(absl::string_view text, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("trainer state '", text, "': ", why));
}

}  // namespace

std::string EncodeTrainerState(const TrainerState& s) {
  return absl::StrCat(kFormat, " skipped=", s.skipped ? 1 : 0,
                      " scale_bits=", std::bit_cast<uint32_t>(s.scaler.scale),
                      " clean_steps=", s.scaler.clean_steps,
                      " hysteresis_left=", s.scaler.hysteresis_left);
}

absl::StatusOr<TrainerState> DecodeTrainerState(absl::string_view text) {
  std::vector<absl::string_view> words = absl::StrSplit(text, ' ');
  if (words.empty() || words[0] != kFormat) {
    return Malformed(text, absl::StrCat("does not start with '", kFormat, "'"));
  }
  std::map<absl::string_view, uint32_t> fields = {
      {"skipped", 0}, {"scale_bits", 0}, {"clean_steps", 0}, {"hysteresis_left", 0}};
  std::map<absl::string_view, bool> seen;
  for (size_t i = 1; i < words.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(words[i], '=');
    auto field = fields.find(kv.first);
    if (field == fields.end()) {
      return Malformed(text, absl::StrCat("unknown field '", kv.first, "'"));
    }
    if (seen[kv.first]) return Malformed(text, absl::StrCat("field '", kv.first, "' repeated"));
    seen[kv.first] = true;
    if (!absl::SimpleAtoi(kv.second, &field->second)) {
      return Malformed(text,
                       absl::StrCat(kv.first, ": '", kv.second, "' is not a 32-bit unsigned"));
    }
  }
  for (const auto& [name, value] : fields) {
    if (!seen[name]) return Malformed(text, absl::StrCat("field '", name, "' missing"));
  }
  if (fields["skipped"] > 1) return Malformed(text, "skipped: must be 0 or 1");
  TrainerState state;
  state.skipped = fields["skipped"] == 1;
  state.scaler.scale = std::bit_cast<float>(fields["scale_bits"]);
  if (!std::isfinite(state.scaler.scale) || state.scaler.scale <= 0) {
    return Malformed(text, absl::StrCat("scale ", state.scaler.scale, " is not finite and > 0"));
  }
  state.scaler.clean_steps = fields["clean_steps"];
  state.scaler.hysteresis_left = fields["hysteresis_left"];
  return state;
}

}  // namespace zerostate::trainer
