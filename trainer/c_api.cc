// The C API of trainer/zerostate_trainer_c.h over trainer::Policy. Built
// into libzerostate_client.so (client/CMakeLists.txt).
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "trainer/c_policy_handle.h"
#include "trainer/policy.h"
#include "trainer/zerostate_trainer_c.h"

namespace {

char* Copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

int Fail(const absl::Status& status, char** error) {
  if (error != nullptr) *error = status.ok() ? nullptr : Copy(std::string(status.message()));
  return static_cast<int>(status.code());
}

absl::Status Null(const char* what) {
  return absl::InvalidArgumentError(std::string(what) + ": null");
}

}  // namespace

extern "C" int zs_policy_create(const char* train_json, zs_policy** out, char** error) {
  if (train_json == nullptr) return Fail(Null("train_json"), error);
  if (out == nullptr) return Fail(Null("out"), error);
  zerostate::v1::TrainConfig train;
  auto parsed = google::protobuf::util::JsonStringToMessage(train_json, &train);
  if (!parsed.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "train_json: not a zerostate.v1.TrainConfig: ", parsed.message().as_string())),
                error);
  }
  auto policy = zerostate::trainer::Policy::Create(train);
  if (!policy.ok()) return Fail(policy.status(), error);
  *out = new zs_policy{*std::move(policy)};
  return Fail(absl::OkStatus(), error);
}

extern "C" void zs_policy_free(zs_policy* policy) { delete policy; }

extern "C" int zs_policy_decide(zs_policy* policy, uint64_t step, double sum_squares,
                                uint64_t nonfinite, double average_over, zs_step_decision* out,
                                char** error) {
  if (out == nullptr) return Fail(Null("out"), error);
  auto d = policy->policy.Decide(step, sum_squares, nonfinite, average_over);
  if (!d.ok()) return Fail(d.status(), error);
  *out = zerostate::trainer::DecisionOf(*d);
  return Fail(absl::OkStatus(), error);
}

extern "C" float zs_policy_loss_scale(const zs_policy* policy) {
  return policy->policy.loss_scale();
}

extern "C" int zs_policy_skipped(const zs_policy* policy) {
  return policy->policy.skipped() ? 1 : 0;
}

extern "C" float zs_policy_learning_rate(const zs_policy* policy, uint64_t step) {
  return policy->policy.LearningRate(step);
}

extern "C" int zs_policy_ends_delayed(const zs_policy* policy, uint64_t step,
                                      int next_is_sync_point) {
  return policy->policy.EndsDelayed(step, next_is_sync_point != 0) ? 1 : 0;
}

extern "C" int zs_policy_unclipped_grad_scale(const zs_policy* policy, double average_over,
                                              float* out, char** error) {
  if (out == nullptr) return Fail(Null("out"), error);
  auto scale = policy->policy.UnclippedGradScale(average_over);
  if (!scale.ok()) return Fail(scale.status(), error);
  *out = *scale;
  return Fail(absl::OkStatus(), error);
}

extern "C" int zs_policy_state(const zs_policy* policy, char** blob, size_t* len, char** error) {
  if (blob == nullptr || len == nullptr) return Fail(Null(blob == nullptr ? "blob" : "len"), error);
  std::string state = policy->policy.TrainerState();
  *blob = Copy(state);
  *len = state.size();
  return Fail(absl::OkStatus(), error);
}

extern "C" int zs_policy_restore(zs_policy* policy, const void* blob, size_t len, char** error) {
  if (blob == nullptr && len > 0) return Fail(Null("blob"), error);
  std::string text(static_cast<const char*>(blob), blob != nullptr ? len : 0);
  return Fail(policy->policy.Restore(text), error);
}
