// capacity_bench: the largest job one state server admits with a given RAM
// budget (--budget_gib, default 16), for each moment format, as the
// server's admission computes it (Job::EstimateBytes: the tier's state, the
// gradient sum and the low-precision copy, the spec), for an AdamW job of
// bf16 gradients and weights in blocks of the default size on one server.
// --json prints one object per format:
//   {"figure":"capacity.<format>","value":params,"unit":"params",
//    "limit":<fp32's params>,"ratio":<over fp32's>,"bytes_per_param":...}
#include <cstdint>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/job_spec.h"
#include "server/core/job.h"

ABSL_FLAG(double, budget_gib, 16, "the server's --memory_budget, in GiB");
ABSL_FLAG(bool, json, false, "print one JSON object per format");

namespace zerostate::server {
namespace {

v1::JobSpec SpecOf(uint64_t params, v1::MomentFormat format) {
  v1::JobSpec spec;
  spec.set_job_id("capacity");
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(static_cast<int64_t>(params));
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_moment_format(format);
  return *NormalizeJobSpec(spec);
}

// The most whole blocks whose job fits `budget` bytes.
uint64_t LargestBlocks(v1::MomentFormat format, uint64_t budget) {
  const uint64_t block = SpecOf(1, format).block_elems();
  uint64_t lo = 0, hi = budget / block + 1;  // fits(lo), !fits(hi): a block costs > 1 B/param
  auto fits = [&](uint64_t blocks) {
    return Job::EstimateBytes(SpecOf(blocks * block, format), blocks) <= budget;
  };
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const auto budget = static_cast<uint64_t>(absl::GetFlag(FLAGS_budget_gib) * (1ull << 30));
  const bool json = absl::GetFlag(FLAGS_json);
  double fp32_params = 0;
  for (auto format : {v1::MOMENTS_FP32, v1::MOMENTS_BF16, v1::MOMENTS_INT8}) {
    const uint64_t blocks = LargestBlocks(format, budget);
    const v1::JobSpec spec = SpecOf(1, format);
    const double params = static_cast<double>(blocks) * spec.block_elems();
    if (fp32_params == 0) fp32_params = params;
    const double bytes = static_cast<double>(Job::EstimateBytes(SpecOf(blocks * spec.block_elems(), format), blocks));
    const std::string name = v1::MomentFormat_Name(format);
    if (json) {
      std::printf("{\"figure\":\"capacity.%s\",\"value\":%.0f,\"unit\":\"params\",\"limit\":%.0f,"
                  "\"ratio\":%.4f,\"bytes_per_param\":%.4f,\"budget_bytes\":%llu}\n",
                  name.c_str(), params, fp32_params, params / fp32_params, bytes / params,
                  static_cast<unsigned long long>(budget));
    } else {
      std::printf("%-13s %14.0f params (%.3f x fp32's), %.3f bytes/param of a %.1f GiB budget\n",
                  name.c_str(), params, params / fp32_params, bytes / params,
                  budget / double(1ull << 30));
    }
  }
  return 0;
}

}  // namespace
}  // namespace zerostate::server

int main(int argc, char** argv) { return zerostate::server::Main(argc, argv); }
