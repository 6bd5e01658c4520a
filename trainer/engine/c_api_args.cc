#include "trainer/engine/c_api_args.h"

#include "absl/strings/str_cat.h"

namespace zerostate::trainer::capi {

absl::Status Null(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": null"));
}

absl::Status RunWait(zs_wait w) {
  const int code = w.fn(w.arg);
  if (code == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("the wait before it returned ", code));
}

absl::Status CheckBeforeStep(const zs_wait* before_step) {
  if (before_step != nullptr && before_step->fn == nullptr) return Null("before_step->fn");
  return absl::OkStatus();
}

CoordinateOptions OptionsOf(float lr, int use_lr, const zs_wait* before_step) {
  CoordinateOptions options;
  if (use_lr != 0) options.lr = lr;
  if (before_step != nullptr) options.before_step = [w = *before_step] { return RunWait(w); };
  return options;
}

}  // namespace zerostate::trainer::capi
