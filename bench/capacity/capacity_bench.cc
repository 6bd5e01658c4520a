// capacity_bench: the largest job one state server admits with a given RAM
// budget (--budget_gib, default 16), for each moment format, as the
// server's admission computes it (Job::EstimateBytes: the tier's state, the
// gradient's memory, the weight copies where kept, the spec), for an AdamW
// job of bf16 gradients and weights in blocks of the default size on one
// server, in three shapes:
//   capacity.<format>: one node, whose bf16 gradient each block keeps where
//     it lands (2 B per parameter; the single-gradient pass), and no bf16
//     weight copy: what the budget admits at most (JobRegistry::AdmitLocked
//     drops the copies where they do not fit; gathers convert the master);
//   capacity.<format>.weight_copy: the same with the copies (2 B per
//     parameter), which a job keeps where the budget has room;
//   capacity.<format>.gradient_sum: two nodes, whose gradients add up in an
//     fp32 sum (4 B per parameter), no copies.
// --json prints one object per figure:
//   {"figure":"capacity.<format>[.<shape>]","value":params,"unit":"params",
//    "limit":<fp32's params in the same shape>,"ratio":<over that>,
//    "bytes_per_param":...,"budget_bytes":...}
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

struct Shape {
  const char* suffix;
  uint32_t nodes;
  bool weight_copy;
};

// The most whole blocks whose job fits `budget` bytes.
uint64_t LargestBlocks(v1::MomentFormat format, Shape shape, uint64_t budget) {
  const uint64_t block = SpecOf(1, format, shape.nodes).block_elems();
  uint64_t lo = 0, hi = budget / block + 1;  // fits(lo), !fits(hi): a block costs > 1 B/param
  auto fits = [&](uint64_t blocks) {
    return Job::EstimateBytes(SpecOf(blocks * block, format, shape.nodes), blocks, TierOptions(),
                              shape.weight_copy) <= budget;
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

Capacity CapacityOf(v1::MomentFormat format, Shape shape, uint64_t budget) {
  const uint64_t blocks = LargestBlocks(format, shape, budget);
  const uint64_t elems = blocks * SpecOf(1, format, shape.nodes).block_elems();
  const double bytes = static_cast<double>(Job::EstimateBytes(
      SpecOf(elems, format, shape.nodes), blocks, TierOptions(), shape.weight_copy));
  return {static_cast<double>(elems), bytes / static_cast<double>(elems)};
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const auto budget = static_cast<uint64_t>(absl::GetFlag(FLAGS_budget_gib) * (1ull << 30));
  const bool json = absl::GetFlag(FLAGS_json);
  for (Shape shape : {Shape{"", 1, false}, Shape{".weight_copy", 1, true},
                      Shape{".gradient_sum", 2, false}}) {
    const double fp32 = CapacityOf(v1::MOMENTS_FP32, shape, budget).params;
    for (auto format : {v1::MOMENTS_FP32, v1::MOMENTS_BF16, v1::MOMENTS_INT8}) {
      const Capacity c = CapacityOf(format, shape, budget);
      const std::string name = "capacity." + v1::MomentFormat_Name(format) + shape.suffix;
      if (json) {
        std::printf("{\"figure\":\"%s\",\"value\":%.0f,\"unit\":\"params\",\"limit\":%.0f,"
                    "\"ratio\":%.4f,\"bytes_per_param\":%.4f,\"budget_bytes\":%llu}\n",
                    name.c_str(), c.params, fp32, c.params / fp32, c.bytes_per_param,
                    static_cast<unsigned long long>(budget));
      } else {
        std::printf("%-40s %14.0f params (%.3f x fp32's), %.3f bytes/param of a %.1f GiB budget\n",
                    name.c_str(), c.params, c.params / fp32, c.bytes_per_param,
                    budget / double(1ull << 30));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace zerostate::server

int main(int argc, char** argv) { return zerostate::server::Main(argc, argv); }
