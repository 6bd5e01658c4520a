// step_bench: one training step of a >= 100M-parameter MLP through real
// zerostate-server processes on loopback, CPU backend, one rank, and each
// of its parts measured alone (the median of three steps): compute (forward+backward), exchange (the
// node's reduce-scatter and all-gather: none on this node of one rank,
// which pushes from its gradients and gathers into its parameters, as its
// engine does), push, step (GradStats + Step),
// gather. With perfect overlap a step takes as long as its longest part;
// the bench prints how close it comes (`overlap`: the longest part's time
// over the step's). Each part's CPU seconds (this process's and the
// servers') show what the host's cores allow: a step needs at least the
// parts' CPU seconds over the cores (`overlap_cores_allow`: the best
// `overlap` there is on this host; on 2 cores the parts need more CPU
// than the longest part leaves), and every part at once with no dependency
// between them (`parts_at_once`, `overlap_host_allows`: the best `overlap`
// the host's cores and memory allow, whatever the schedule; on the 2-core
// machine below the target). The same with the delayed parameter update
// (`overlap_delayed`: train.delayed_update, the server's step and the
// gathers under the next step's compute).
// `server_step` is the server's own step inside the job (its gradient
// statistics and optimizer pass, from its zerostate_step_phase_seconds in
// the fastest timed step, waiting for gradients left out) in parameters per
// second (`server_step_alone`: in the step measured part by part, nothing
// beside it), against the memory limit of an AdamW step (optimizer_bench's
// TrafficPass) in this process with as many threads as the server's pass
// runs on (--server_threads plus the calling thread), over as many
// parameters as the model's: one pass right before and one right after
// each Step measured alone, which is compared with their mean (the median
// of the part steps' ratios counts), as optimizer_bench alternates its
// passes; `server_step`, with the median of those passes. (On the 2-core
// VM the bandwidth swings by 1.5x within a minute, and a pass over 64 Mi
// parameters read 1.3-1.5x one over the model's 100.7M.)
// `server_step_at_once`: the Step of `parts_at_once`, with a compute, a
// push and a gather beside it all the time, against the same limit.
// `speculative_*`: the same model as a job with JobSpec.speculative_step
// (the server steps each block as soon as its gradients are in, with the
// Step's parameters sent ahead; the Step then only commits): its median
// step, the worker's step part and the server's optimizer pass inside the
// Step, each against the plain job's (ratio > 1: faster).
//   step_bench [--json] [--servers=1] [--server_threads=N] [--hidden=8192,8192] [--steps=3]
//              [--speculative=true] [--whole_landing] [--streams_per_server=N] [--wire=bf16]
//              [--server_nice=N]
// --json prints one object per line: {"figure","value","unit","limit","ratio"}.
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/optimizer/step_state.h"
#include "tests/testing/server_process.h"
#include "worker/config.h"
#include "worker/cpu_backend.h"
#include "worker/job.h"
#include "worker/teacher_data.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int, servers, 1, "state servers to start");
ABSL_FLAG(int, server_threads, 0, "--threads of each server (0: one less than the cores)");
ABSL_FLAG(std::string, server_binary, ZEROSTATE_SERVER_PATH, "the zerostate-server to start");
ABSL_FLAG(int64_t, limit_params, 0,
          "parameters of the memory limit pass (0: the model's; at most the model's)");
ABSL_FLAG(uint32_t, input, 2048, "input width");
ABSL_FLAG(std::string, hidden, "8192,8192", "hidden widths");
ABSL_FLAG(uint32_t, output, 2048, "output width");
ABSL_FLAG(uint32_t, micro_batch, 4, "samples per micro-batch");
ABSL_FLAG(int, steps, 3, "end-to-end steps timed (after one warm-up step)");
ABSL_FLAG(std::string, wire, "fp32",
          "gradients and weights on the wire: fp32, or bf16 (bf16 gradients of one node are "
          "summed with streaming stores, so their statistics are read back from memory)");
ABSL_FLAG(bool, whole_landing, false,
          "train.whole_landing: every weight lands at the end of each step, not layer by layer "
          "in the next forward (the next forward then never runs beside the server's pass)");
ABSL_FLAG(int, streams_per_server, 0,
          "the client's streams per server (0: its default, raised for same-host servers)");
ABSL_FLAG(int, server_nice, 0,
          "the servers' nice value, 0 to 19: above 0 they yield the cores to the trainer's "
          "compute on the host they share (`nice -n N zerostate-server` in a deployment)");
ABSL_FLAG(bool, speculative, true,
          "also time the same model as a speculative_step job (speculative_* figures)");

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
  c.mutable_train()->set_whole_landing(absl::GetFlag(FLAGS_whole_landing));
  const std::string wire = absl::GetFlag(FLAGS_wire);
  if (wire == "bf16") {
    c.mutable_train()->set_grad_dtype(v1::DTYPE_BF16);
    c.mutable_train()->set_weight_dtype(v1::DTYPE_BF16);
  } else if (wire != "fp32") {
    Check(absl::InvalidArgumentError(absl::StrCat("--wire: ", wire, " is neither fp32 nor bf16")),
          "flags");
  }
  return *NormalizeConfig(c, 1);
}

int ServerThreads() {
  const int t = absl::GetFlag(FLAGS_server_threads);
  if (t > 0) return t;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
}

// The phases of zerostate_step_phase_seconds (server/core/step_phases.h).
constexpr const char* kPhases[] = {"wait_gradients", "grad_stats", "optimizer", "commit",
                                   "copy_on_write"};
using PhaseSeconds = std::map<std::string, double>;

// Each server's seconds so far in each phase of `job`'s steps.
std::vector<PhaseSeconds> ScrapePhases(testing::ServerCluster& cluster, const std::string& job) {
  std::vector<PhaseSeconds> out;
  for (int i = 0; i < cluster.size(); ++i) {
    auto page = testing::ScrapeMetrics(cluster.server(i).metrics_address());
    Check(page.status(), "scrape server metrics");
    PhaseSeconds& phases = out.emplace_back();
    for (const char* phase : kPhases) {
      const double v = testing::MetricValue(
          *page, absl::StrCat("zerostate_step_phase_seconds_sum{job_id=\"", job, "\",phase=\"",
                              phase, "\"}"));
      phases[phase] = std::max(0.0, v);  // -1: never observed
    }
  }
  return out;
}

// The server's own step: its gradient statistics and optimizer pass.
double ServerStep(const PhaseSeconds& p) { return p.at("grad_stats") + p.at("optimizer"); }

// Each phase between two scrapes, of the server whose own step took longest.
PhaseSeconds Slowest(const std::vector<PhaseSeconds>& before,
                     const std::vector<PhaseSeconds>& after) {
  PhaseSeconds slowest;
  for (size_t i = 0; i < after.size(); ++i) {
    PhaseSeconds d;
    for (const char* phase : kPhases) d[phase] = after[i].at(phase) - before[i].at(phase);
    if (slowest.empty() || ServerStep(d) > ServerStep(slowest)) slowest = d;
  }
  return slowest;
}

// CPU seconds so far of this process (the trainer: compute, the client's
// streams) and of every server process (/proc/PID/stat: utime, stime).
double CpuSeconds(testing::ServerCluster& cluster) {
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  double total = seconds(self.ru_utime) + seconds(self.ru_stime);
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (int i = 0; i < cluster.size(); ++i) {
    std::ifstream in(absl::StrCat("/proc/", cluster.server(i).pid(), "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The fields after the command's closing parenthesis, from field 3.
    std::vector<std::string> f = absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
    if (f.size() < 13) Check(absl::InternalError("/proc/PID/stat: too few fields"), "cpu time");
    total += (std::stod(f[11]) + std::stod(f[12])) / tick;  // utime, stime: fields 14, 15
  }
  return total;
}

struct Part {
  double seconds = 0;
  double cpu = 0;  // CPU seconds of the trainer and the servers meanwhile
};

struct Parts {
  Part compute, exchange, push, step, gather;
  PhaseSeconds server;  // the servers' phases in the Step alone
  double limit = 0;     // the memory limit beside it, params/s (LimitPass)
};

// The memory limit of an AdamW step (TrafficPass) over `params`
// parameters with as many threads as the server's pass, in parameters per
// second: a state allocated and filled once, one pass per Rate(), so that
// it is sampled next to the passes compared with it.
class LimitPass {
 public:
  explicit LimitPass(uint64_t params) : state_(params), threads_(ServerThreads() + 1) {
    if (!state_.ok()) Check(absl::ResourceExhaustedError("memory limit state"), "allocate");
    state_.Fill(threads_);
  }
  double Rate() {
    samples_.push_back(server::MemoryLimitParamsPerSecond(state_, threads_, 1));
    return samples_.back();
  }
  double Median() const {
    std::vector<double> s = samples_;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
  }

 private:
  server::StepState state_;
  const int threads_;
  std::vector<double> samples_;
};

// One part alone: its wall and CPU seconds added to `part`.
template <typename F>
void TimePart(testing::ServerCluster& cluster, Part* part, F&& f) {
  const double cpu0 = CpuSeconds(cluster);
  part->seconds += Time(std::forward<F>(f));
  part->cpu += CpuSeconds(cluster) - cpu0;
}

// The parts after the compute and the exchange, as a step runs them: the
// push of `step`'s gradients from `from`, GradStats and Step, the gather
// of the new weights into `to`.
void PushPart(client::JobClient* job, uint64_t step, const float* from) {
  Check(job->Push(step, 0, Range{0, job->layout().used_elems}, from, v1::DTYPE_FP32), "push");
}
void StepPart(client::JobClient* job, uint64_t step) {
  Check(job->GradStats(step).status(), "grad stats");
  Check(job->Step(step, 1e-4f, 1.0f, false), "step");
}
void GatherPart(client::JobClient* job, uint64_t step, float* to) {
  Check(job->Gather(step + 1, Range{0, job->layout().used_elems}, to, v1::DTYPE_FP32), "gather");
}

// One step by hand, one part at a time; the Step between two passes of
// `limit` (none: not sampled).
Parts MeasureParts(client::JobClient* job, CpuBackend* backend, const v1::TrainConfig& train,
                   testing::ServerCluster& cluster, uint64_t step, LimitPass* limit) {
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  data.Fill(step * n, n, x.data(), y.data());
  const Range used{0, job->layout().used_elems};
  std::vector<float> staging(used.size());
  // A node of one rank pushes straight from its gradients and gathers
  // straight into its parameters, as the engine does (no exchange).
  float* grads = backend->GradsInPlace();
  float* params = backend->ParamsInPlace();
  float* push_from = grads != nullptr ? grads : staging.data();
  float* gather_to = params != nullptr ? params : staging.data();
  Parts p;
  Check(backend->ZeroGrads(), "zero");
  TimePart(cluster, &p.compute, [&] {
    Check(backend->ForwardBackward(x.data(), y.data(), n, 1.0f, nullptr).status(), "compute");
  });
  if (grads == nullptr) {
    TimePart(cluster, &p.exchange, [&] { Check(backend->ReduceScatter(used, push_from), "reduce-scatter"); });
  }
  TimePart(cluster, &p.push, [&] { PushPart(job, step, push_from); });
  const double limit_before = limit != nullptr ? limit->Rate() : 0;
  const auto before = ScrapePhases(cluster, train.job_id());
  TimePart(cluster, &p.step, [&] { StepPart(job, step); });
  p.server = Slowest(before, ScrapePhases(cluster, train.job_id()));
  if (limit != nullptr) p.limit = (limit_before + limit->Rate()) / 2;
  TimePart(cluster, &p.gather, [&] { GatherPart(job, step, gather_to); });
  if (params == nullptr) {
    TimePart(cluster, &p.exchange, [&] { Check(backend->AllGather(used, gather_to), "all-gather"); });
  }
  return p;
}

constexpr uint64_t kPartSteps = 3;

// Each part's median over `all`, and the servers' phases of the step
// whose own step against the limit beside it was the median.
Parts MedianParts(std::vector<Parts> all) {
  Parts out;
  for (Part Parts::*part : {&Parts::compute, &Parts::exchange, &Parts::push, &Parts::step, &Parts::gather}) {
    std::sort(all.begin(), all.end(),
              [part](const Parts& a, const Parts& b) { return (a.*part).seconds < (b.*part).seconds; });
    out.*part = all[all.size() / 2].*part;
  }
  // The step whose server step against its own limit is the median (its
  // rate over the limit falls as seconds x limit grows).
  std::sort(all.begin(), all.end(), [](const Parts& a, const Parts& b) {
    return ServerStep(a.server) * a.limit < ServerStep(b.server) * b.limit;
  });
  out.server = all[all.size() / 2].server;
  out.limit = all[all.size() / 2].limit;
  return out;
}

// The cores this process may run on (taskset included).
int Cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return static_cast<int>(std::thread::hardware_concurrency());
  return CPU_COUNT(&set);
}

// The server's step inside the job against `limit`: in the pipelined
// steps (its best timed step: the gathers it streams and the next forward
// run beside it) and in the step measured alone (nothing beside it).
// `worker_step`: the step part as the worker saw it (GradStats and Step).
void PrintServerStep(PhaseSeconds phases, const Parts& alone, const PhaseSeconds& at_once,
                     uint64_t params, double worker_step, double limit) {
  for (const char* phase : kPhases) {
    Print(absl::StrCat("server_", phase), phases[phase], "s", phases["optimizer"],
          phases[phase] / phases["optimizer"]);
  }
  const double rate = params / ServerStep(phases);
  Print(absl::StrCat("memory_limit.threads=", ServerThreads() + 1), limit, "params/s", limit, 1.0);
  // The same in bytes: an AdamW pass moves kStepBytesPerParam per parameter.
  Print(absl::StrCat("memory_bandwidth.threads=", ServerThreads() + 1),
        limit * server::kStepBytesPerParam / 1e9, "GB/s", limit * server::kStepBytesPerParam / 1e9,
        1.0);
  Print("worker_step_rate", params / worker_step, "params/s", limit, params / worker_step / limit);
  Print("server_step", rate, "params/s", limit, rate / limit);
  const double alone_rate = params / ServerStep(alone.server);
  Print("server_step_alone", alone_rate, "params/s", alone.limit, alone_rate / alone.limit);
  // The Step of parts_at_once: with the trainer's compute, a push and a
  // gather beside it all the time (more than a step puts beside its pass:
  // the next forward starts with the first layer's weights, the push after
  // the backward), the pass's share of the host.
  const double at_once_rate = params / ServerStep(at_once);
  Print("server_step_at_once", at_once_rate, "params/s", limit, at_once_rate / limit);
}

// The step's limit with perfect overlap.
double Longest(const Parts& p) {
  return std::max({p.compute.seconds, p.exchange.seconds, p.push.seconds, p.step.seconds,
                   p.gather.seconds});
}

// Every figure against the longest part (the step's limit with perfect
// overlap), and the limits the host sets: the parts' CPU seconds spread
// over every core, and the parts run at once (MeasureAtOnce).
void PrintFigures(const Parts& parts, const Part& at_once, double median, uint64_t params,
                  const StepReport& last) {
  const double longest = Longest(parts);
  const int cores = Cores();
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("model %.1fM parameters, %d server(s), micro-batch %u, %d cores\n", params / 1e6,
                absl::GetFlag(FLAGS_servers), absl::GetFlag(FLAGS_micro_batch), cores);
  }
  Print("params", static_cast<double>(params), "count", 1e8, params / 1e8);
  double sum = 0, cpu = 0;
  for (auto [name, part] : {std::pair{"compute", parts.compute}, {"exchange", parts.exchange},
                            {"push", parts.push}, {"step", parts.step}, {"gather", parts.gather}}) {
    Print(absl::StrCat("part_", name), part.seconds, "s", longest, part.seconds / longest);
    // Cores busy in the part, the trainer's and the servers' together.
    const double busy = part.seconds > 0 ? part.cpu / part.seconds : 0;
    Print(absl::StrCat("part_", name, "_cores"), busy, "cores", cores, busy / cores);
    sum += part.seconds;
    cpu += part.cpu;
  }
  Print("push_ns_per_param", parts.push.seconds / params * 1e9, "ns",
        parts.push.seconds / params * 1e9, 1.0);
  Print("step_end_to_end", median, "s", longest, longest / median);
  Print("overlap", median, "s", longest, longest / median);
  Print("step_sum_of_parts", sum, "s", longest, longest / sum);
  // The parts need `cpu` CPU seconds a step: with every core busy the step
  // takes at least cpu / cores, so that is the best overlap there is here.
  const double cpu_floor = std::max(longest, cpu / cores);
  Print("step_cpu_seconds", cpu, "s", longest * cores, longest * cores / cpu);
  Print("overlap_cores_allow", cpu_floor, "s", longest, longest / cpu_floor);
  Print("overlap_of_what_cores_allow", median, "s", cpu_floor, cpu_floor / median);
  // No schedule does better than every part at once, no dependency between them.
  Print("parts_at_once", at_once.seconds, "s", longest, longest / at_once.seconds);
  const double at_once_busy = at_once.cpu / at_once.seconds;
  Print("parts_at_once_cores", at_once_busy, "cores", cores, at_once_busy / cores);
  const double host_floor = std::max(longest, at_once.seconds);
  Print("overlap_host_allows", host_floor, "s", longest, longest / host_floor);
  Print("overlap_of_what_host_allows", median, "s", host_floor, host_floor / median);
  const auto& t = last.times;
  for (auto [name, v] : {std::pair{"compute", t.compute}, {"exchange", t.exchange}, {"push", t.push},
                         {"step", t.step}, {"gather", t.gather}}) {
    Print(absl::StrCat("last_step_", name), v, "s", median, v / median);
  }
}

// One job's rank: its model, backend and engine.
struct Session {
  OpenedJob opened;
  std::unique_ptr<LocalGroup> group;
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<Engine> engine;
  uint64_t params = 0;
};

Session OpenSession(client::Client* client, const v1::WorkerConfig& config) {
  const v1::TrainConfig& train = config.train();
  Session s;
  auto model = std::make_unique<Mlp>(train.model());
  const Topology topo{0, 1, 0, 1};
  auto opened = OpenJob(client, BuildJobSpec(train, *model, 1), topo, RendezvousScope(config));
  Check(opened.status(), "register");
  s.opened = *std::move(opened);
  client::JobClient* job = s.opened.job.get();
  model->Bind(job->layout());
  s.params = job->layout().used_elems;
  s.group = MakeThreadGroup(1, job->layout().total_elems);
  std::vector<uint64_t> ready = model->ReadyPoints();
  s.backend = std::make_unique<CpuBackend>(s.group.get(), 0, std::move(model));
  s.engine = std::make_unique<Engine>(job, s.backend.get(), train, topo, ready);
  Check(s.engine->LoadWeights(0), "load weights");
  return s;
}

// A second job of the same model on the same servers, for MeasureAtOnce:
// its own memory, and the gradient it computed once, pushed at every step.
struct OtherJob {
  std::string id;
  Session session;
  std::vector<float> staging;
  const float* from = nullptr;  // the gradient pushed
  float* to = nullptr;          // where gathers land

  client::JobClient* job() const { return session.opened.job.get(); }
};

OtherJob OpenOther(client::Client* client, v1::WorkerConfig config, const std::string& id) {
  config.mutable_train()->set_job_id(id);
  OtherJob o;
  o.id = id;
  o.session = OpenSession(client, config);
  const v1::TrainConfig& train = config.train();
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  data.Fill(0, n, x.data(), y.data());
  CpuBackend* backend = o.session.backend.get();
  o.staging.resize(o.job()->layout().used_elems);
  Check(backend->ZeroGrads(), "zero");
  Check(backend->ForwardBackward(x.data(), y.data(), n, 1.0f, nullptr).status(), "compute");
  float* grads = backend->GradsInPlace();
  float* params = backend->ParamsInPlace();
  if (grads == nullptr) {
    Check(backend->ReduceScatter(Range{0, o.job()->layout().used_elems}, o.staging.data()),
          "reduce-scatter");
  }
  o.from = grads != nullptr ? grads : o.staging.data();
  o.to = params != nullptr ? params : o.staging.data();
  return o;
}

// All of a step's work at once, with no dependency between its parts: the
// compute of `s`, the Step of job `a` (its gradients pushed before), and
// the push of job `b`'s next step beside the gather of its current
// weights, all of the same model on the same servers. Whatever the
// schedule, a step's parts cannot overlap better than this on this host:
// the longest part over it is the best `overlap` the host's cores and
// memory allow (`overlap_cores_allow` counts CPU seconds only, not the
// memory the parts share, nor the cache they evict from each other). The
// median of kPartSteps, after a round that allocates the jobs' optimizer
// state.
// A round of every part at once: its wall and CPU seconds, and the
// servers' phases of job a's Step in it.
struct AtOnce {
  Part part;
  PhaseSeconds server;
};

AtOnce MeasureAtOnce(Session& s, OtherJob& a, OtherJob& b, const v1::TrainConfig& train,
                     testing::ServerCluster& cluster) {
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  data.Fill(0, n, x.data(), y.data());
  // b's step 0, whole: its weights are at version 1 when the rounds start.
  PushPart(b.job(), 0, b.from);
  StepPart(b.job(), 0);
  std::vector<AtOnce> rounds;
  for (uint64_t step = 0; step <= kPartSteps; ++step) {
    PushPart(a.job(), step, a.from);
    Check(s.backend->ZeroGrads(), "zero");
    AtOnce round;
    const auto before = ScrapePhases(cluster, a.id);
    TimePart(cluster, &round.part, [&] {
      std::thread stepped([&] { StepPart(a.job(), step); });
      std::thread pushed([&] { PushPart(b.job(), step + 1, b.from); });
      std::thread gathered([&] { GatherPart(b.job(), step, b.to); });
      Check(s.backend->ForwardBackward(x.data(), y.data(), n, 1.0f, nullptr).status(), "compute");
      stepped.join();
      pushed.join();
      gathered.join();
    });
    round.server = Slowest(before, ScrapePhases(cluster, a.id));
    StepPart(b.job(), step + 1);
    if (step > 0) rounds.push_back(round);
  }
  std::sort(rounds.begin(), rounds.end(),
            [](const AtOnce& l, const AtOnce& r) { return l.part.seconds < r.part.seconds; });
  return rounds[rounds.size() / 2];
}

// --steps timed steps from `step` on, after `warmups` steps.
struct Timed {
  double median = 0;       // end to end
  double worker_step = 0;  // the step part as the worker saw it
  PhaseSeconds best;       // the timed step where the server's own step was fastest
  StepReport last;
};

Timed TimeSteps(Session& s, const v1::TrainConfig& train, testing::ServerCluster& cluster,
                uint64_t step, int warmups) {
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  MicroBatchFn micro = [&](uint32_t, float scale, const GradsReadyFn& r) {
    data.Fill(step * n, n, x.data(), y.data());
    return s.backend->ForwardBackward(x.data(), y.data(), n, scale, r);
  };
  for (int i = 0; i < warmups; ++i) Check(s.engine->Step(step++, micro).status(), "warm-up step");
  auto phases_seen = ScrapePhases(cluster, train.job_id());
  Timed t;
  std::vector<double> seconds, step_seconds;
  for (int i = 0; i < absl::GetFlag(FLAGS_steps); ++i) {
    auto r = s.engine->Step(step++, micro);
    Check(r.status(), "step");
    seconds.push_back(r->seconds);
    step_seconds.push_back(r->times.step);
    auto phases_now = ScrapePhases(cluster, train.job_id());
    PhaseSeconds d = Slowest(phases_seen, phases_now);
    if (t.best.empty() || ServerStep(d) < ServerStep(t.best)) t.best = d;
    phases_seen = std::move(phases_now);
    t.last = *r;
  }
  std::sort(seconds.begin(), seconds.end());
  t.median = seconds[seconds.size() / 2];
  std::sort(step_seconds.begin(), step_seconds.end());
  t.worker_step = step_seconds[step_seconds.size() / 2];
  return t;
}

// The same steps with the delayed update (train.delayed_update: the
// server's step and the gathers under the next step's compute): the step
// end to end and its overlap, against the parts measured alone.
void PrintDelayed(client::Client* client, v1::WorkerConfig config,
                  testing::ServerCluster& cluster, const Parts& parts) {
  config.mutable_train()->set_job_id("step-bench-delayed");
  config.mutable_train()->mutable_delayed_update()->set_enabled(true);
  Session s = OpenSession(client, config);
  const Timed t = TimeSteps(s, config.train(), cluster, 0, 2);
  Check(s.engine->Drain(), "drain");
  const double longest = Longest(parts);
  Print("step_end_to_end_delayed", t.median, "s", longest, longest / t.median);
  Print("overlap_delayed", t.median, "s", longest, longest / t.median);
  Check(s.opened.job->Delete(), "delete the delayed job");
}

// The same model as a speculative_step job (the server steps each block as
// its gradients arrive, the Step confirms): its step against the plain one's.
void PrintSpeculative(client::Client* client, v1::WorkerConfig config,
                      testing::ServerCluster& cluster, const Timed& plain) {
  config.mutable_train()->set_job_id("step-bench-speculative");
  config.mutable_train()->set_speculative_step(true);
  Session s = OpenSession(client, config);
  // Two warm-up steps: the first allocates what the speculation keeps.
  const Timed t = TimeSteps(s, config.train(), cluster, 0, 2);
  if (!absl::GetFlag(FLAGS_json)) {
    const auto& l = t.last.times;
    std::printf("speculative last step split: compute %.3f exchange %.3f push %.3f step %.3f gather %.3f s\n",
                l.compute, l.exchange, l.push, l.step, l.gather);
  }
  // Ratios above 1: the speculative step is faster than the plain one.
  Print("speculative_step_end_to_end", t.median, "s", plain.median, plain.median / t.median);
  Print("speculative_worker_step", t.worker_step, "s", plain.worker_step,
        plain.worker_step / t.worker_step);
  // The Step's own pass: commit only where the speculation held.
  const double pass = t.best.at("optimizer"), plain_pass = plain.best.at("optimizer");
  Print("speculative_step_pass", pass, "s", plain_pass, plain_pass / std::max(pass, 1e-9));
  // The blocks the Steps found stepped with their parameters, of every
  // block the speculation stepped (the rest were stepped again).
  double confirmed = 0, redone = 0;
  for (int i = 0; i < cluster.size(); ++i) {
    auto page = testing::ScrapeMetrics(cluster.server(i).metrics_address());
    Check(page.status(), "scrape server metrics");
    const std::string job = absl::StrCat("zerostate_speculative_blocks_total{job_id=\"",
                                         config.train().job_id(), "\",outcome=\"");
    confirmed += std::max(0.0, testing::MetricValue(*page, job + "confirmed\"}"));
    redone += std::max(0.0, testing::MetricValue(*page, job + "redone\"}"));
  }
  Print("speculative_blocks_confirmed", confirmed, "blocks", confirmed + redone,
        confirmed / std::max(confirmed + redone, 1.0));
  Check(s.opened.job->Delete(), "delete the speculative job");
}

// The servers, at --server_nice: every thread of each (threads made later
// inherit it from the thread that makes them). Not by starting them from a
// thread of that nice value: a child of a thread that ends is sent its
// parent-death signal.
absl::StatusOr<std::unique_ptr<testing::ServerCluster>> StartServers() {
  const int nice = absl::GetFlag(FLAGS_server_nice);
  if (nice < 0 || nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat("--server_nice: ", nice, " is not in [0, 19]"));
  }
  testing::ServerProcessOptions options;
  options.binary = absl::GetFlag(FLAGS_server_binary);
  options.args = {absl::StrCat("--threads=", ServerThreads()), "--metrics_listen=127.0.0.1:0"};
  auto cluster = testing::ServerCluster::Start(absl::GetFlag(FLAGS_servers), options);
  if (!cluster.ok() || nice == 0) return cluster;
  for (int i = 0; i < (*cluster)->size(); ++i) {
    const std::string tasks = absl::StrCat("/proc/", (*cluster)->server(i).pid(), "/task");
    for (const auto& task : std::filesystem::directory_iterator(tasks)) {
      const int tid = std::stoi(task.path().filename().string());
      if (setpriority(PRIO_PROCESS, tid, nice) != 0) {
        return absl::InternalError(
            absl::StrCat("setpriority(", tid, ", ", nice, "): ", std::strerror(errno)));
      }
    }
  }
  return cluster;
}

int Main() {
  const v1::WorkerConfig config = BenchConfig();
  const v1::TrainConfig& train = config.train();
  auto cluster = StartServers();
  Check(cluster.status(), "start servers");
  client::ClientOptions copts;
  copts.servers = (*cluster)->addresses();
  copts.plaintext = true;  // loopback servers started with --plaintext
  if (const int streams = absl::GetFlag(FLAGS_streams_per_server); streams > 0) {
    copts.streams_per_server = streams;
    copts.same_host_streams_per_server = 0;  // exactly these
  }
  auto client = client::Client::Connect(copts);
  Check(client.status(), "connect");
  Timed plain;
  Parts parts;
  AtOnce at_once;
  uint64_t params = 0;
  std::unique_ptr<LimitPass> limit;
  {
    Session s = OpenSession(client->get(), config);
    params = s.params;
    const int64_t limit_params = absl::GetFlag(FLAGS_limit_params);
    limit = std::make_unique<LimitPass>(
        limit_params > 0 ? std::min<uint64_t>(params, static_cast<uint64_t>(limit_params)) : params);
    // Step 0 by hand allocates the server's optimizer state; steps 1 to
    // kPartSteps are the ones measured (the compute alone swings by 15%
    // from one to the next on the H200 host's CPUs).
    MeasureParts(s.opened.job.get(), s.backend.get(), train, **cluster, 0, nullptr);
    std::vector<Parts> measured;
    for (uint64_t step = 1; step <= kPartSteps; ++step) {
      measured.push_back(
          MeasureParts(s.opened.job.get(), s.backend.get(), train, **cluster, step, limit.get()));
    }
    parts = MedianParts(measured);
    plain = TimeSteps(s, train, **cluster, kPartSteps + 1, 1);
    Check(s.engine->Drain(), "drain");  // the last Step may still be under way
    {
      OtherJob a = OpenOther(client->get(), config, "step-bench-at-once-a");
      OtherJob b = OpenOther(client->get(), config, "step-bench-at-once-b");
      at_once = MeasureAtOnce(s, a, b, train, **cluster);
      Check(a.job()->Delete(), "delete an at-once job");
      Check(b.job()->Delete(), "delete an at-once job");
    }
    Check(s.opened.job->Delete(), "delete the job");  // its memory, for the next
  }
  PrintFigures(parts, at_once.part, plain.median, params, plain.last);
  PrintDelayed(client->get(), config, **cluster, parts);
  if (absl::GetFlag(FLAGS_speculative)) PrintSpeculative(client->get(), config, **cluster, plain);
  Check((*cluster)->StopAll(), "stop servers");
  PrintServerStep(plain.best, parts, at_once.server, params, plain.worker_step, limit->Median());
  return 0;
}

}  // namespace
}  // namespace zerostate::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return zerostate::worker::Main();
}
