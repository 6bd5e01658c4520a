#include "worker/progress.h"

#include "absl/strings/str_format.h"

namespace zerostate::worker {

std::string FormatProgress(const StepReport& r, uint64_t global_batch) {
  const auto& t = r.times;
  return absl::StrFormat(
      "step %d loss %.5f lr %.3g scale %g samples/s %.0f%s | compute %.1fms exchange %.1fms "
      "push %.1fms step %.1fms gather %.1fms | wire push %.3f gather %.3f B/param",
      r.step, r.loss, r.lr, r.loss_scale, r.seconds > 0 ? global_batch / r.seconds : 0.0,
      r.skipped ? " (skipped: overflow)" : r.delayed ? " (delayed)" : "", t.compute * 1e3, t.exchange * 1e3, t.push * 1e3,
      t.step * 1e3, t.gather * 1e3, r.push_bytes_per_param, r.gather_bytes_per_param);
}

}  // namespace zerostate::worker
