// capacity_bench: the largest job one state server admits with a given RAM
// budget (--budget_gib, default 16), for each moment format, as the
// server's admission computes it (Job::EstimateBytes: the tier's state, the
// gradient's memory and the low-precision copy, the spec), for an AdamW job
// of bf16 gradients and weights in blocks of the default size on one
// server, in two shapes:
//   capacity.<format>: one node, whose bf16 gradient each block keeps where
//     it lands (2 B per parameter; the single-gradient pass);
//   capacity.<format>.gradient_sum: two nodes, whose gradients add up in an
//     fp32 sum (4 B per parameter), as every job's did before.
// --json prints one object per figure:
//   {"figure":"capacity.<format>[.gradient_sum]","value":params,"unit":"params",
//    "limit":<fp32's params in the same shape>,"ratio":<over that>,
//    "ratio_to_fp32_gradient_sum":<over fp32 with a gradient sum>,"bytes_per_param":...}
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/job_spec.h"
#include "server/core/job.h"

ABSL_FLAG(double, budget_gib, 16, "the server's --memory_budget, in GiB");
ABSL_FLAG(bool, json, false, "print one JSON object per format");

namespace zerostate::server {
namespace {

v1::JobSpec SpecOf(uint64_t params, v1::MomentFormat format, uint32_t nodes) {
  v1::JobSpec spec;
  spec.set_job_id("capacity");
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(static_cast<int64_t>(params));
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(nodes);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_moment_format(format);
  return *NormalizeJobSpec(spec);
}

// The most whole blocks whose job fits `budget` bytes.
uint64_t LargestBlocks(v1::MomentFormat format, uint32_t nodes, uint64_t budget) {
  const uint64_t block = SpecOf(1, format, nodes).block_elems();
  uint64_t lo = 0, hi = budget / block + 1;  // fits(lo), !fits(hi): a block costs > 1 B/param
  auto fits = [&](uint64_t blocks) {
    return Job::EstimateBytes(SpecOf(blocks * block, format, nodes), blocks) <= budget;
  };
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

struct Capacity {
  double params = 0;
  double bytes_per_param = 0;
};

Capacity CapacityOf(v1::MomentFormat format, uint32_t nodes, uint64_t budget) {
  const uint64_t blocks = LargestBlocks(format, nodes, budget);
  const uint64_t elems = blocks * SpecOf(1, format, nodes).block_elems();
  const double bytes = static_cast<double>(Job::EstimateBytes(SpecOf(elems, format, nodes), blocks));
  return {static_cast<double>(elems), bytes / static_cast<double>(elems)};
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const auto budget = static_cast<uint64_t>(absl::GetFlag(FLAGS_budget_gib) * (1ull << 30));
  const bool json = absl::GetFlag(FLAGS_json);
  const double fp32_sum = CapacityOf(v1::MOMENTS_FP32, 2, budget).params;
  for (uint32_t nodes : {1u, 2u}) {
    const double fp32 = CapacityOf(v1::MOMENTS_FP32, nodes, budget).params;
    for (auto format : {v1::MOMENTS_FP32, v1::MOMENTS_BF16, v1::MOMENTS_INT8}) {
      const Capacity c = CapacityOf(format, nodes, budget);
      const std::string name =
          "capacity." + v1::MomentFormat_Name(format) + (nodes == 2 ? ".gradient_sum" : "");
      if (json) {
        std::printf("{\"figure\":\"%s\",\"value\":%.0f,\"unit\":\"params\",\"limit\":%.0f,"
                    "\"ratio\":%.4f,\"ratio_to_fp32_gradient_sum\":%.4f,"
                    "\"bytes_per_param\":%.4f,\"budget_bytes\":%llu}\n",
                    name.c_str(), c.params, fp32, c.params / fp32, c.params / fp32_sum,
                    c.bytes_per_param, static_cast<unsigned long long>(budget));
      } else {
        std::printf("%-40s %14.0f params (%.3f x fp32's, %.3f x fp32's with a gradient sum), "
                    "%.3f bytes/param of a %.1f GiB budget\n",
                    name.c_str(), c.params, c.params / fp32, c.params / fp32_sum,
                    c.bytes_per_param, budget / double(1ull << 30));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace zerostate::server

int main(int argc, char** argv) { return zerostate::server::Main(argc, argv); }
