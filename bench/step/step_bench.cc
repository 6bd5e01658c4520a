// step_bench: one training step of a >= 100M-parameter MLP through real
// zerostate-server processes on loopback, CPU backend, one rank, and each
// of its parts measured alone: compute (forward+backward), exchange (the
// node's reduce-scatter and all-gather), push, step (GradStats + Step),
// gather. With perfect overlap a step takes as long as its longest part;
// the bench prints how close it comes.
//   step_bench [--json] [--servers=1] [--hidden=8192,8192] [--steps=3]
// --json prints one object per line: {"figure","value","unit","limit","ratio"}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/testing/server_process.h"
#include "worker/config.h"
#include "worker/cpu_backend.h"
#include "worker/job.h"
#include "worker/teacher_data.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int, servers, 1, "state servers to start");
ABSL_FLAG(int, server_threads, 2, "--threads of each server");
ABSL_FLAG(uint32_t, input, 2048, "input width");
ABSL_FLAG(std::string, hidden, "8192,8192", "hidden widths");
ABSL_FLAG(uint32_t, output, 2048, "output width");
ABSL_FLAG(uint32_t, micro_batch, 4, "samples per micro-batch");
ABSL_FLAG(int, steps, 3, "end-to-end steps timed (after one warm-up step)");

namespace zerostate::worker {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double Time(F&& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "step_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

void Print(const std::string& figure, double value, const char* unit, double limit, double ratio) {
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%.6g,\"ratio\":%.4f}\n",
                figure.c_str(), value, unit, limit, ratio);
  } else {
    std::printf("%-22s %10.4f %s   (limit %.4f, ratio %.3f)\n", figure.c_str(), value, unit, limit, ratio);
  }
}

v1::WorkerConfig BenchConfig() {
  v1::WorkerConfig c;
  auto* m = c.mutable_train()->mutable_model();
  m->set_input_dim(absl::GetFlag(FLAGS_input));
  for (auto h : absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',')) m->add_hidden(std::stoul(std::string(h)));
  m->set_output_dim(absl::GetFlag(FLAGS_output));
  c.mutable_train()->set_job_id("step-bench");
  c.mutable_train()->set_micro_batch_size(absl::GetFlag(FLAGS_micro_batch));
  c.mutable_train()->set_steps(1 + 1 + absl::GetFlag(FLAGS_steps));
  return *NormalizeConfig(c, 1);
}

struct Parts {
  double compute = 0, exchange = 0, push = 0, step = 0, gather = 0;
};

// Step 0 by hand, one part at a time.
Parts MeasureParts(client::JobClient* job, CpuBackend* backend, const v1::TrainConfig& train) {
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  data.Fill(0, n, x.data(), y.data());
  const Range used{0, job->layout().used_elems};
  std::vector<float> slice(used.size());
  Parts p;
  Check(backend->ZeroGrads(), "zero");
  p.compute = Time([&] { Check(backend->ForwardBackward(x.data(), y.data(), n, 1.0f, nullptr).status(), "compute"); });
  p.exchange = Time([&] { Check(backend->ReduceScatter(used, slice.data()), "reduce-scatter"); });
  p.push = Time([&] { Check(job->Push(0, 0, used, slice.data(), v1::DTYPE_FP32), "push"); });
  p.step = Time([&] {
    Check(job->GradStats(0).status(), "grad stats");
    Check(job->Step(0, 1e-4f, 1.0f, false), "step");
  });
  p.gather = Time([&] { Check(job->Gather(1, used, slice.data(), v1::DTYPE_FP32), "gather"); });
  p.exchange += Time([&] { Check(backend->AllGather(used, slice.data()), "all-gather"); });
  return p;
}

// Every figure against the longest part (the step's limit with perfect overlap).
void PrintFigures(const Parts& parts, double median, uint64_t params, const StepReport& last) {
  const double longest = std::max({parts.compute, parts.exchange, parts.push, parts.step, parts.gather});
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("model %.1fM parameters, %d server(s), micro-batch %u\n", params / 1e6,
                absl::GetFlag(FLAGS_servers), absl::GetFlag(FLAGS_micro_batch));
  }
  Print("params", static_cast<double>(params), "count", 1e8, params / 1e8);
  for (auto [name, v] : {std::pair{"part_compute", parts.compute}, {"part_exchange", parts.exchange},
                         {"part_push", parts.push}, {"part_step", parts.step}, {"part_gather", parts.gather}}) {
    Print(name, v, "s", longest, v / longest);
  }
  Print("push_ns_per_param", parts.push / params * 1e9, "ns", parts.push / params * 1e9, 1.0);
  Print("step_end_to_end", median, "s", longest, longest / median);
  Print("step_sum_of_parts", parts.compute + parts.exchange + parts.push + parts.step + parts.gather, "s",
        longest, longest / (parts.compute + parts.exchange + parts.push + parts.step + parts.gather));
  const auto& t = last.times;
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("last step split: compute %.3f exchange %.3f push %.3f step %.3f gather %.3f s\n",
                t.compute, t.exchange, t.push, t.step, t.gather);
  }
}

int Main() {
  const v1::WorkerConfig config = BenchConfig();
  const v1::TrainConfig& train = config.train();
  testing::ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {absl::StrCat("--threads=", absl::GetFlag(FLAGS_server_threads)), "--metrics_listen="};
  auto cluster = testing::ServerCluster::Start(absl::GetFlag(FLAGS_servers), options);
  Check(cluster.status(), "start servers");
  client::ClientOptions copts;
  copts.servers = (*cluster)->addresses();
  copts.plaintext = true;  // loopback servers started with --plaintext
  auto client = client::Client::Connect(copts);
  Check(client.status(), "connect");
  auto model = std::make_unique<Mlp>(train.model());
  const Topology topo{0, 1, 0, 1};
  auto opened = OpenJob(client->get(), BuildJobSpec(train, *model, 1), topo, RendezvousScope(config));
  Check(opened.status(), "register");
  client::JobClient* job = opened->job.get();
  model->Bind(job->layout());
  const uint64_t params = job->layout().used_elems;
  auto group = MakeThreadGroup(1, job->layout().total_elems);
  std::vector<uint64_t> ready = model->ReadyPoints();
  CpuBackend backend(group.get(), 0, std::move(model));
  Engine engine(job, &backend, train, topo, ready);
  Check(engine.LoadWeights(0), "load weights");

  Parts parts = MeasureParts(job, &backend, train);
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  uint64_t step = 1;
  MicroBatchFn micro = [&](uint32_t, float scale, const GradsReadyFn& r) {
    data.Fill(step * n, n, x.data(), y.data());
    return backend.ForwardBackward(x.data(), y.data(), n, scale, r);
  };
  Check(engine.Step(step++, micro).status(), "warm-up step");
  std::vector<double> seconds;
  StepReport last;
  for (int i = 0; i < absl::GetFlag(FLAGS_steps); ++i) {
    auto r = engine.Step(step++, micro);
    Check(r.status(), "step");
    seconds.push_back(r->seconds);
    last = *r;
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  PrintFigures(parts, median, params, last);
  Check((*cluster)->StopAll(), "stop servers");
  return 0;
}

}  // namespace
}  // namespace zerostate::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return zerostate::worker::Main();
}
