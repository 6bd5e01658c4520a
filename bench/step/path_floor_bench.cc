// path_floor_bench: what the host's memory gives the bytes of one step of
// our same-host path (bench/step/path_stages.h: d2h, fold, pass, gather,
// h2d, with the server's kernels), with no dependency between the stages.
// device_all.sh's floor is the path's bytes over the bandwidth of one
// AdamW-shaped pass (optimizer_bench's TrafficPass), as if every stage
// moved its bytes at that rate at once. This bench measures the stages:
//   stage_alone.<wire>.<stage>_ms   each stage alone on every core (ratio:
//                                   its bytes at the TrafficPass bandwidth
//                                   / its time, 1 = at that bandwidth)
//   path_floor.<wire>.bytes_ms      the path's bytes / that bandwidth
//   path_floor.<wire>.in_sequence_ms  the stages one after another, alone
//   path_floor.<wire>.at_once_ms    every stage at once (best split of the
//                                   cores between the pass and the copies)
//   path_floor.<wire>.best_ms       the better of the two, against bytes_ms
//                                   (ratio: the multiple of the floor below
//                                   which no schedule of these kernels gets
//                                   on this host, the dependencies aside)
//   path_floor.<wire>.scheduled_ms  with the chain's dependencies alone
//                                   (path_schedule.h: gradients out in the
//                                   backward's order, each piece folded,
//                                   stepped, gathered and copied back as
//                                   soon as it can be, lowest piece first),
//                                   no barrier: weights served before the
//                                   norm is known (no step of ours does)
//   path_floor.<wire>.scheduled_speculative_ms  the speculative step's:
//                                   the same, but no gather before every
//                                   fold (the norm validates the weights)
//   path_floor.<wire>.scheduled_sync_ms  the synchronous step's: no pass
//                                   before every fold
//   pass_with_gathers.<wire>.pass   the pass with the gathers and the h2d
//                                   copies streamed beside it, as in the
//                                   synchronous step: its rate against the
//                                   TrafficPass limit (server_step's), at
//                                   the split where all three end first
// The GPU's copies run when the build has CUDA and the host a GPU (else
// those stages are left out, and bytes_ms counts only the others).
//   path_floor_bench [--json] [--params=100681728] [--wires=fp32,bf16]
//                    [--threads=0 (every core)] [--reps=3]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/optimizer/step_state.h"
#include "bench/step/path_schedule.h"
#include "bench/step/path_stages.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int64_t, params, 100681728, "parameters (default: the MLP of device_all.sh)");
ABSL_FLAG(std::string, wires, "fp32,bf16", "wire dtypes to run, comma-separated");
ABSL_FLAG(int, threads, 0, "CPU threads in all (0: every core)");
ABSL_FLAG(int, reps, 3, "timed runs of each measure (the best is kept), after one warm-up");

namespace zerostate::bench {
namespace {

void Fail(const std::string& why) {
  std::fprintf(stderr, "path_floor_bench: %s\n", why.c_str());
  std::exit(1);
}

void Print(const std::string& figure, double value, const char* unit, double limit, double ratio,
           const std::string& extra = "") {
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%.6g,\"ratio\":%.4f%s}\n",
                figure.c_str(), value, unit, limit, ratio, extra.c_str());
  } else {
    std::printf("%-40s %10.3f %-9s (limit %.3f, ratio %.3f)%s\n", figure.c_str(), value, unit,
                limit, ratio, extra.c_str());
  }
  std::fflush(stdout);
}

// The best of --reps runs of `stages` at once (after one warm-up).
AtOnce Best(const std::vector<const PathStage*>& stages, const std::vector<int>& threads) {
  AtOnce best;
  best.seconds = 1e30;
  for (int r = 0; r <= absl::GetFlag(FLAGS_reps); ++r) {
    auto run = RunAtOnce(stages, threads);
    if (!run.ok()) Fail(std::string(run.status().message()));
    if (r > 0 && run->seconds < best.seconds) best = *run;
  }
  return best;
}

// Splits of `cores` between the pass and the copies beside it.
std::vector<int> PassThreads(int cores) {
  std::vector<int> out;
  for (int p : {cores - 1, cores - 2, cores - 4, cores - 6, cores / 2})
    if (p >= 1 && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  return out;
}

// Threads for each of `stages`: the pass gets `pass`, the other CPU
// stages share the rest evenly (at least one each).
std::vector<int> Split(const std::vector<const PathStage*>& stages, int cores, int pass) {
  int others = 0;
  for (const PathStage* s : stages) others += !s->dma && s->name != "pass";
  std::vector<int> threads;
  int left = std::max(others, cores - pass);
  for (const PathStage* s : stages) {
    if (s->name == "pass") {
      threads.push_back(pass);
    } else if (s->dma) {
      threads.push_back(1);
    } else {
      const int t = std::max(1, left / others);
      threads.push_back(t);
      left -= t;
      --others;
    }
  }
  return threads;
}

std::string SplitText(const std::vector<const PathStage*>& stages, const std::vector<int>& threads) {
  std::string out;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i]->dma) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", stages[i]->name, "=", threads[i]);
  }
  return out;
}

// The best split of `cores` for `stages` at once: the one where the last
// stage ends first.
std::pair<AtOnce, std::vector<int>> BestSplit(const std::vector<const PathStage*>& stages, int cores) {
  std::pair<AtOnce, std::vector<int>> best;
  best.first.seconds = 1e30;
  for (int pass : PassThreads(cores)) {
    std::vector<int> threads = Split(stages, cores, pass);
    AtOnce run = Best(stages, threads);
    if (run.seconds < best.first.seconds) best = {run, threads};
  }
  return best;
}

void RunWire(const std::string& wire_name, size_t params, int cores, double bandwidth) {
  const v1::DType wire = wire_name == "bf16" ? v1::DTYPE_BF16 : v1::DTYPE_FP32;
  auto buffers = PathBuffers::Create(params, wire, cores);
  if (!buffers.ok()) Fail(std::string(buffers.status().message()));
  const PathBuffers& b = **buffers;
  if (!b.dma_status().ok()) {
    std::fprintf(stderr, "path_floor_bench: %s: %s\n", wire_name.c_str(),
                 std::string(b.dma_status().message()).c_str());
  }
  const std::string at = absl::StrCat(".", wire_name, ".");
  auto ms_at_bandwidth = [&](double bytes_per_param) { return bytes_per_param * params / bandwidth * 1e3; };

  double bytes = 0, in_sequence = 0;
  std::vector<const PathStage*> all;
  for (const PathStage& s : b.stages()) {
    const double ms = Best({&s}, {cores}).seconds * 1e3;
    const double limit = ms_at_bandwidth(s.bytes_per_param);
    Print(absl::StrCat("stage_alone", at, s.name, "_ms"), ms, "ms", limit, limit / ms,
          absl::StrCat(",\"bytes_per_param\":", s.bytes_per_param));
    bytes += s.bytes_per_param;
    in_sequence += ms;
    all.push_back(&s);
  }
  const double floor = ms_at_bandwidth(bytes);
  Print(absl::StrCat("path_floor", at, "bytes_ms"), floor, "ms", floor, 1.0,
        absl::StrCat(",\"bytes_per_param\":", bytes));
  Print(absl::StrCat("path_floor", at, "in_sequence_ms"), in_sequence, "ms", floor, in_sequence / floor);

  auto [once, split] = BestSplit(all, cores);
  std::string ends;
  for (size_t i = 0; i < all.size(); ++i)
    absl::StrAppend(&ends, ",\"", all[i]->name, "_end_ms\":", once.stage_seconds[i] * 1e3);
  Print(absl::StrCat("path_floor", at, "at_once_ms"), once.seconds * 1e3, "ms", floor,
        once.seconds * 1e3 / floor, absl::StrCat(",\"threads\":\"", SplitText(all, split), "\"", ends));
  const double best = std::min(in_sequence, once.seconds * 1e3);
  Print(absl::StrCat("path_floor", at, "best_ms"), best, "ms", floor, best / floor);

  // With the chain's dependencies alone (path_schedule.h), the speculative
  // step's (no gather before every gradient is folded) and the synchronous
  // step's (no pass before it).
  for (auto [name, barrier] : {std::pair{"scheduled", Barrier{}},
                               {"scheduled_speculative", SpeculativeBarrier()},
                               {"scheduled_sync", SynchronousBarrier()}}) {
    Scheduled sched{1e30, 0};
    for (int r = 0; r <= absl::GetFlag(FLAGS_reps); ++r) {
      auto run = RunScheduled(b.stages(), cores, barrier);
      if (!run.ok()) Fail(std::string(run.status().message()));
      if (r > 0 && run->seconds < sched.seconds) sched = *run;
    }
    Print(absl::StrCat("path_floor", at, name, "_ms"), sched.seconds * 1e3, "ms", floor,
          sched.seconds * 1e3 / floor, absl::StrCat(",\"first_piece_ms\":", sched.first_seconds * 1e3));
  }

  // The synchronous step's pass, with the gathers and the h2d copies
  // streaming the weights out beside it.
  std::vector<const PathStage*> beside;
  for (const char* name : {"pass", "gather", "h2d"})
    if (const PathStage* s = b.stage(name)) beside.push_back(s);
  auto [with, with_split] = BestSplit(beside, cores);
  const double pass_rate = params / with.stage_seconds[0];
  const double limit_rate = bandwidth / server::kStepBytesPerParam;
  Print(absl::StrCat("pass_with_gathers", at, "pass"), pass_rate, "params/s", limit_rate,
        pass_rate / limit_rate,
        absl::StrCat(",\"threads\":\"", SplitText(beside, with_split), "\",\"all_end_ms\":",
                     with.seconds * 1e3, ",\"pass_end_ms\":", with.stage_seconds[0] * 1e3));
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  using namespace zerostate;
  absl::ParseCommandLine(argc, argv);
  const int64_t params = absl::GetFlag(FLAGS_params);
  int cores = absl::GetFlag(FLAGS_threads);
  if (cores == 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  if (params < 1) bench::Fail(absl::StrCat("--params ", params, ": must be >= 1"));
  if (cores < 2) bench::Fail(absl::StrCat("--threads ", cores, ": the path needs at least 2"));
  if (absl::GetFlag(FLAGS_reps) < 1) bench::Fail("--reps: must be >= 1");
  std::vector<std::string> wires = absl::StrSplit(absl::GetFlag(FLAGS_wires), ',');
  for (const std::string& w : wires)
    if (w != "fp32" && w != "bf16") bench::Fail(absl::StrCat("--wires: ", w, " is neither fp32 nor bf16"));

  // The host's bandwidth: the best TrafficPass over the thread counts from
  // half the cores up (as device_all.sh's floor takes the best).
  double bandwidth = 0;
  {
    server::StepState state(static_cast<size_t>(params));
    if (!state.ok()) bench::Fail("the memory limit's state: allocation failed");
    state.Fill(cores);
    for (int t = std::max(1, cores / 2); t <= cores; ++t) {
      bandwidth = std::max(bandwidth, server::MemoryLimitParamsPerSecond(state, t, absl::GetFlag(FLAGS_reps)) *
                                          server::kStepBytesPerParam);
    }
  }
  bench::Print("memory_bandwidth", bandwidth / 1e9, "GB/s", bandwidth / 1e9, 1.0);
  for (const std::string& w : wires) bench::RunWire(w, static_cast<size_t>(params), cores, bandwidth);
  return 0;
}
