// cuda_compute_bench: the CUDA backend's own part of a step on the MLP of
// device_all.sh, with no server and no engine: the forward and backward
// alone (ForwardBackward, no layer reported ready), and with each layer's
// gradient copied to pinned host memory as the engine does it
// (StartReduceScatter, FinishReduceScatter per layer from the ready
// callback, at fp32 and at bf16 staging). Against pure_gpu_step.py's step
// (PyTorch, fused AdamW on the GPU) run beside it, this says how much of
// the worker's `compute` and `exchange` parts is the GPU's own work.
//   cuda_compute_bench [--json] [--input=2048] [--hidden=8192,8192]
//                      [--output=2048] [--batch=64] [--steps=20]
// Figures (ms per step, the median of --steps after 3 warm-up steps):
//   cuda_forward_backward_ms, cuda_with_d2h_<fp32|bf16>_ms (limit: the
//   forward and backward alone; ratio: alone / with).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "common/convert.h"
#include "common/init.h"
#include "common/job_spec.h"
#include "worker/config.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/job.h"
#include "worker/mlp.h"
#include "worker/teacher_data.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int, input, 2048, "input dimension");
ABSL_FLAG(std::string, hidden, "8192,8192", "hidden dimensions, comma-separated");
ABSL_FLAG(int, output, 2048, "output dimension");
ABSL_FLAG(int, batch, 64, "micro-batch");
ABSL_FLAG(int, steps, 20, "timed steps");

namespace zerostate::worker::cuda {
namespace {

using Clock = std::chrono::steady_clock;

void Fail(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "cuda_compute_bench: %s: %s\n", what, std::string(s.message()).c_str());
  std::exit(1);
}

void Print(const std::string& figure, double value, double limit) {
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"ms\",\"limit\":%.6g,\"ratio\":%.4f}\n",
                figure.c_str(), value, limit, limit / value);
  } else {
    std::printf("%-32s %8.3f ms  (limit %.3f, ratio %.3f)\n", figure.c_str(), value, limit, limit / value);
  }
}

struct Setup {
  v1::MlpConfig model;  // normalized
  Layout layout;
  std::vector<uint64_t> ready_points;  // each layer's first element, as ForwardBackward reports it
};

Setup MakeSetup() {
  v1::WorkerConfig c;
  v1::MlpConfig* m = c.mutable_train()->mutable_model();
  m->set_input_dim(absl::GetFlag(FLAGS_input));
  for (auto h : absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',')) m->add_hidden(std::stoul(std::string(h)));
  m->set_output_dim(absl::GetFlag(FLAGS_output));
  c.mutable_train()->set_job_id("cuda-compute-bench");
  c.mutable_train()->set_micro_batch_size(absl::GetFlag(FLAGS_batch));
  c.mutable_train()->set_block_elems(262144);
  auto normalized = NormalizeConfig(c, 1);
  if (!normalized.ok()) Fail(normalized.status(), "the model flags");
  Setup s;
  s.model = normalized->train().model();
  Mlp mlp(s.model);
  auto spec = NormalizeJobSpec(BuildJobSpec(normalized->train(), mlp, 1));
  if (!spec.ok()) Fail(spec.status(), "the job spec");
  s.layout = LayoutOf(*spec);
  mlp.Bind(s.layout);
  s.ready_points = mlp.ReadyPoints();
  return s;
}

// Median ms per step of `steps` steps after 3 warm-up steps: ZeroGrads and
// one ForwardBackward, each layer's gradient copied out when `d2h`.
double TimeSteps(const Setup& setup, v1::DType staging, bool d2h) {
  CudaBackendOptions o;
  o.model = setup.model;
  o.layout = setup.layout;
  o.max_batch = absl::GetFlag(FLAGS_batch);
  o.grad_dtype = staging;
  o.weight_dtype = staging;
  auto id = NewNcclId();
  if (!id.ok()) Fail(id.status(), "NewNcclId");
  o.nccl_id = *id;
  auto made = MakeCudaBackend(o);
  if (!made.ok()) Fail(made.status(), "MakeCudaBackend");
  Backend& b = **made;
  const uint64_t total = setup.layout.total_elems;
  auto weights = b.AllocHost(total);
  auto grads = b.AllocHost(total);
  if (!weights.ok() || !grads.ok()) Fail(absl::ResourceExhaustedError("pinned host buffers"), "AllocHost");
  std::vector<float> init(total);
  FillInitialWeights(setup.layout, 9, Range{0, total}, init.data());
  if (staging == v1::DTYPE_BF16) {
    EncodeFloats(init.data(), total, v1::DTYPE_BF16, weights->get());
  } else {
    std::copy(init.begin(), init.end(), weights->get());
  }
  if (auto s = b.AllGather(Range{0, total}, weights->get()); !s.ok()) Fail(s, "AllGather");
  const uint32_t n = absl::GetFlag(FLAGS_batch);
  TeacherData data(setup.model);
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  data.Fill(0, n, x.data(), y.data());
  // The layers' ranges, last first, as ForwardBackward reports them ready.
  const std::vector<uint64_t>& begins = setup.ready_points;
  const size_t esize = staging == v1::DTYPE_BF16 ? 2 : 4;
  GradsReadyFn ready = [&](uint64_t begin) {
    // The layer's gradient: from `begin` to the previous ready point.
    uint64_t end = total;
    for (uint64_t p : begins)
      if (p > begin) end = std::min(end, p);
    void* out = reinterpret_cast<char*>(grads->get()) + begin * esize;
    if (auto s = b.StartReduceScatter(Range{begin, end}, out); !s.ok()) Fail(s, "StartReduceScatter");
    if (auto s = b.FinishReduceScatter(); !s.ok()) Fail(s, "FinishReduceScatter");
  };
  std::vector<double> ms;
  for (int i = 0; i < 3 + absl::GetFlag(FLAGS_steps); ++i) {
    const auto start = Clock::now();
    if (auto s = b.ZeroGrads(); !s.ok()) Fail(s, "ZeroGrads");
    auto loss = b.ForwardBackward(x.data(), y.data(), n, 1.0f, d2h ? ready : GradsReadyFn());
    if (!loss.ok()) Fail(loss.status(), "ForwardBackward");
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace
}  // namespace zerostate::worker::cuda

int main(int argc, char** argv) {
  using namespace zerostate::worker::cuda;
  absl::ParseCommandLine(argc, argv);
  if (DeviceCount() == 0) {
    std::fprintf(stderr, "cuda_compute_bench: no CUDA device\n");
    return 1;
  }
  const Setup setup = MakeSetup();
  const double alone = TimeSteps(setup, zerostate::v1::DTYPE_FP32, false);
  Print("cuda_forward_backward_ms", alone, alone);
  for (auto [name, dtype] : {std::pair{"fp32", zerostate::v1::DTYPE_FP32}, {"bf16", zerostate::v1::DTYPE_BF16}}) {
    Print(std::string("cuda_with_d2h_") + name + "_ms", TimeSteps(setup, dtype, true), alone);
  }
  return 0;
}
