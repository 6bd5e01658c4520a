// optimizer_bench: the fused AdamW step against the machine's memory limit,
// both measured in the same run on the same memory.
//
// For N parameters (--params, default 64M) it times
//   (a) the limit: TrafficPass, a plain vector load/store pass over exactly
//       the bytes an AdamW step moves (reads p, g, m, v: 16 B; writes p, m,
//       v and the bf16 copy, the copy with non-temporal stores: 14 B per
//       parameter), with the widest ISA;
//   (b) StepBlock(AdamW) for every ISA this CPU has,
//   (c) with the widest ISA, the job's path with tensor groups
//       (StepBlockRuns): each block one run of one group, as most blocks
//       are (it should equal (b)), and each block cut into 4 runs of 2
//       groups (adamw_step_groups=4: a block where the group changes 3 times),
//   (d) with the widest ISA, the fold of one node's bf16 gradient into the
//       blocks' fp32 sums with non-temporal stores (as a job of one node
//       pushing bf16 folds it) and the sums' gradient statistics: read back
//       after the fold (fold_bf16_then_stats) or squared by the fold itself
//       (fold_bf16_stats_fused, DecodeFloatsStreamingSquared; the same
//       figure bit for bit), the ratio being fused over read,
//   (e) per moment format (fp32, bf16, int8; JobSpec.moment_format), with
//       the widest ISA at 1 thread and at --threads threads, the AdamW step
//       on blocks laid out as the RAM tier holds them, against the memory
//       limit for the bytes that format moves: (a)'s bandwidth in the same
//       run over StepBytesPerParam(format) (figure
//       adamw_step.moments=<format>); the same step reading one node's
//       bf16 gradient where it landed instead of an fp32 sum (the
//       single-gradient pass, adamw_step_single_gradient.moments=<format>,
//       2 bytes less); and the bytes per parameter of each path of a step
//       (fold, pass, gather copy) for that format, with and without it;
//       and at 1 thread the step on parameters that stay in cache
//       (adamw_step_in_cache.moments=<format>, timed by the thread's CPU
//       clock), its arithmetic's own rate,
//       against the memory limit; each (e) figure names the kernel table
//       ("kernels": the ISA, "+avx512_bf16" where that converts the copy),
// (a) to (d) each with 1..nproc threads (--threads), which take blocks of 262144
// parameters from a shared counter as the server's pool does. The passes of
// (a) and (b) take turns; a figure is the best of --reps timed passes after
// a warm-up. It prints params/s, GB/s and the ratio to the limit with the
// same number of threads, and the share of the cores the passes got (other
// work on the machine lowers every figure). --json prints one object per
// figure instead: {"figure":..., "value":..., "unit":..., "limit":..., "ratio":...}
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/optimizer/step_state.h"
#include "common/convert.h"
#include "server/core/optimizer/dispatch.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/optimizer/param_groups.h"

ABSL_FLAG(int64_t, params, int64_t{64} << 20, "parameters of state to step");
ABSL_FLAG(int, threads, 0, "measure 1..threads threads (0: one per core)");
ABSL_FLAG(int, reps, 5, "timed passes per figure, after one warm-up pass; the best counts");
ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(bool, formats_only, false, "only (e): the step per moment format");

namespace zerostate::server {
namespace {

struct Options {
  size_t params = 0;
  int reps = 0;
  int max_threads = 0;
  bool json = false;
};

// Reads the flags; returns false (after printing why) on a bad value.
bool ReadFlags(Options* o) {
  const int64_t params = absl::GetFlag(FLAGS_params);
  o->reps = absl::GetFlag(FLAGS_reps);
  o->max_threads = absl::GetFlag(FLAGS_threads);
  o->json = absl::GetFlag(FLAGS_json);
  if (o->max_threads == 0) o->max_threads = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [name, v] : {std::pair{"--params", params}, std::pair{"--reps", int64_t{o->reps}},
                         std::pair{"--threads", int64_t{o->max_threads}}}) {
    if (v < 1) {
      std::fprintf(stderr, "optimizer_bench: %s %lld: must be >= 1\n", name,
                   static_cast<long long>(v));
      return false;
    }
  }
  o->params = static_cast<size_t>(params);
  return true;
}

// CPU seconds this process has used, user and system.
double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

// This thread's CPU time: the in-cache figure's clock, which time spent
// off the core (other work on the machine) does not count.
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

StepParams AdamWParams() {
  StepParams p;
  p.config.set_kind(v1::OPTIMIZER_ADAMW);
  p.config.set_beta1(0.9f);
  p.config.set_beta2(0.999f);
  p.config.set_eps(1e-8f);
  p.config.set_weight_decay(0.01f);
  p.lr = 1e-3f;
  return p;
}

void PrintJson(const std::string& figure, double value, const char* unit, double limit) {
  std::printf(
      "{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%.6g,"
      "\"ratio\":%.4f}\n",
      figure.c_str(), value, unit, limit, value / limit);
}

void Report(const Options& o, const std::string& figure, double params_per_s, double limit_pps) {
  if (o.json) return PrintJson(figure, params_per_s, "params/s", limit_pps);
  std::printf("%-34s %8.3f Gparam/s %8.2f GB/s %7.3f ns/param  ratio %.3f\n", figure.c_str(),
              params_per_s / 1e9, params_per_s * kStepBytesPerParam / 1e9, 1e9 / params_per_s,
              params_per_s / limit_pps);
}

// The share of `threads` cores the passes got: below 1 when other work on
// the machine took some, and every figure of that thread count is low.
void ReportCpuShare(const Options& o, int threads, double share) {
  const std::string figure = "cpu_share.threads=" + std::to_string(threads);
  if (o.json) return PrintJson(figure, share, "cores/thread", 1.0);
  std::printf("%-34s %8.2f of %d core(s)%s\n", figure.c_str(), share * threads, threads,
              share < 0.9 ? "  (machine busy: figures are low)" : "");
}

// Best seconds of the limit pass and of each ISA's AdamW step, with
// `threads` threads. Their passes take turns, so a machine shared with other
// work slows them alike; each is the best of o.reps timed passes after one
// warm-up pass. Also the share of `threads` cores the passes got.
struct Timings {
  double limit_s = 1e30;
  std::vector<double> step_s;
  double groups1_s = 1e30;  // StepBlockRuns, one run per block
  double groups4_s = 1e30;  // StepBlockRuns, four runs per block
  double fold_read_s = 1e30;   // the bf16 fold, then the statistics read back
  double fold_fused_s = 1e30;  // the bf16 fold squaring what it writes
  double cpu_share = 0;
};

// Runs of a block of n elements: one, or four alternating between groups 1
// and 2 (cut at multiples of 64, as GroupRuns cuts).
std::vector<GroupRun> RunsOf(size_t n, int count) {
  std::vector<GroupRun> runs;
  const auto quarter = static_cast<uint32_t>(n / count / 64 * 64);
  for (int i = 0; i < count; ++i) {
    const uint32_t end = i + 1 == count ? static_cast<uint32_t>(n) : (i + 1) * quarter;
    runs.push_back(GroupRun{i * quarter, end, static_cast<uint32_t>(1 + i % 2)});
  }
  return runs;
}

// The job's group parameters: no group, no weight decay, lr x 0.5.
std::vector<StepParams> GroupParams(const StepParams& adamw) {
  std::vector<StepParams> by(3, adamw);
  by[1].config.set_weight_decay(0);
  by[2].lr = adamw.lr * 0.5f;
  return by;
}

Timings TimePasses(const Options& o, int threads, const StepState& state) {
  const std::vector<Isa> isas = SupportedIsas();
  StepParams adamw = AdamWParams();
  Timings t;
  t.step_s.assign(isas.size(), 1e30);
  double wall_s = 0;
  const double cpu_start = ProcessCpuSeconds();
  for (int r = 0; r <= o.reps; ++r) {
    const double l =
        PassSeconds(threads, state, [&](const BlockRefs& b) { TrafficPass(isas.back(), b); });
    if (r > 0) t.limit_s = std::min(t.limit_s, l);
    wall_s += l;
    for (size_t k = 0; k < isas.size(); ++k) {
      const double s =
          PassSeconds(threads, state, [&](const BlockRefs& b) { StepBlock(isas[k], adamw, b); });
      if (r > 0) t.step_s[k] = std::min(t.step_s[k], s);
      wall_s += s;
      ++adamw.t;
    }
    for (auto [count, best] : {std::pair{1, &t.groups1_s}, std::pair{4, &t.groups4_s}}) {
      const std::vector<StepParams> by = GroupParams(adamw);
      const double s = PassSeconds(threads, state, [&](const BlockRefs& b) {
        StepBlockRuns(isas.back(), RunsOf(b.n, count), by, b);
      });
      if (r > 0) *best = std::min(*best, s);
      wall_s += s;
      ++adamw.t;
    }
    // The fold reads the bf16 copy the steps wrote and writes the gradient.
    for (auto [fused, best] : {std::pair{false, &t.fold_read_s}, std::pair{true, &t.fold_fused_s}}) {
      const double s = PassSeconds(threads, state, [&, fused = fused](const BlockRefs& b) {
        auto* sum = const_cast<float*>(b.grad);
        if (fused) {
          SquareLanes lanes;
          DecodeFloatsStreamingSquared(isas.back(), b.lowp, b.n, v1::DTYPE_BF16, sum, &lanes);
          FoldGradStats(lanes);
        } else {
          DecodeFloatsStreaming(isas.back(), b.lowp, b.n, v1::DTYPE_BF16, sum);
          ComputeGradStats(isas.back(), sum, b.n);
        }
      });
      if (r > 0) *best = std::min(*best, s);
      wall_s += s;
    }
  }
  t.cpu_share = (ProcessCpuSeconds() - cpu_start) / (wall_s * threads);
  return t;
}

void MeasureThreads(const Options& o, int threads, const StepState& state) {
  const std::vector<Isa> isas = SupportedIsas();
  const Timings t = TimePasses(o, threads, state);
  const double n = static_cast<double>(state.params());
  const std::string suffix = ".threads=" + std::to_string(threads);
  ReportCpuShare(o, threads, t.cpu_share);
  Report(o, "memory_limit." + std::string(IsaName(isas.back())) + suffix, n / t.limit_s,
         n / t.limit_s);
  for (size_t k = 0; k < isas.size(); ++k) {
    Report(o, "adamw_step." + std::string(IsaName(isas[k])) + suffix, n / t.step_s[k],
           n / t.limit_s);
  }
  const std::string widest(IsaName(isas.back()));
  Report(o, "adamw_step_groups=1." + widest + suffix, n / t.groups1_s, n / t.limit_s);
  Report(o, "adamw_step_groups=4." + widest + suffix, n / t.groups4_s, n / t.limit_s);
  for (auto [name, sec] : {std::pair{"fold_bf16_then_stats.", t.fold_read_s},
                           std::pair{"fold_bf16_stats_fused.", t.fold_fused_s}}) {
    const std::string figure = name + widest + suffix;
    const double pps = n / sec, read_pps = n / t.fold_read_s;
    if (o.json) {
      PrintJson(figure, pps, "params/s", read_pps);
    } else {
      std::printf("%-34s %8.3f Gparam/s %8.3f ns/param  ratio %.3f (to the fold, then read)\n",
                  figure.c_str(), pps / 1e9, 1e9 / pps, pps / read_pps);
    }
  }
}

// The kernel table the step runs (KernelsFor): the ISA, and for AVX-512
// whether AVX512_BF16 converts the bf16 copy.
std::string KernelsName(Isa isa) {
  const bool bf16 = isa == Isa::kAvx512 && kernels::HasAvx512Bf16();
  return std::string(IsaName(isa)) + (bf16 ? "+avx512_bf16" : "");
}

const char* FormatName(MomentFormat f) {
  return f == MomentFormat::kFp32 ? "fp32" : f == MomentFormat::kBf16 ? "bf16" : "int8";
}

// The bytes per parameter of each path of one step of a one-node job that
// pushes bf16 gradients, before and after the single-gradient pass:
//   fold: the pushed bf16 gradient read (2) and its fp32 sum written (4,
//   non-temporal; the statistics squared by the fold); the pass then reads
//   the sum (4 of StepBytesPerParam(format));
//   land: the pushed gradient copied where it lands (read 2, write 2; the
//   statistics squared as it is copied); the pass reads it as bf16 (2);
//   gather copy: the gather reads the bf16 copy (2).
void ReportPaths(const Options& o, MomentFormat format) {
  const double fold = 2 + 4, land = 2 + 2, gather = 2;
  const double pass = StepBytesPerParam(format), single = StepBytesPerParam(format, true);
  const std::string f = FormatName(format);
  if (o.json) {
    for (auto [path, bytes] : {std::pair{"fold", fold}, std::pair{"pass", pass},
                               std::pair{"gather_copy", gather},
                               std::pair{"total", fold + pass + gather},
                               std::pair{"single_gradient.land", land},
                               std::pair{"single_gradient.pass", single},
                               std::pair{"single_gradient.total", land + single + gather}}) {
      std::printf("{\"figure\":\"bytes_per_param.%s.moments=%s\",\"value\":%.4f,"
                  "\"unit\":\"B/param\"}\n", path, f.c_str(), bytes);
    }
    return;
  }
  std::printf("bytes/param moments=%s: fold %.0f + pass %.3f + gather copy %.0f = %.3f; "
              "single-gradient pass: land %.0f + pass %.3f + gather copy %.0f = %.3f\n",
              f.c_str(), fold, pass, gather, fold + pass + gather, land, single, gather,
              land + single + gather);
}

// (e) for one format: the best of o.reps passes of the limit (on the fp32
// state), of the step (on `state`, reading the fp32 gradient sum) and of the
// single-gradient pass (reading the bf16 gradient where it landed), taking
// turns. Each against the limit for the bytes it moves.
// Returns the limit of the step (reading the fp32 sum) in params/s.
double MeasureFormat(const Options& o, int threads, const StepState& fp32,
                     const CompactStepState& state, MomentFormat format) {
  const Isa isa = SupportedIsas().back();
  StepParams adamw = AdamWParams();
  double limit_s = 1e30, step_s[2] = {1e30, 1e30};
  for (int r = 0; r <= o.reps; ++r) {
    const double l = PassSeconds(threads, fp32, [&](const BlockRefs& b) { TrafficPass(isa, b); });
    if (r > 0) limit_s = std::min(limit_s, l);
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      const double s = RunBlocks(threads, state.num_blocks(), [&](size_t b) {
        StepBlock(isa, adamw, state.Block(b, bf16 == 1));
      });
      ++adamw.t;
      if (r > 0) step_s[bf16] = std::min(step_s[bf16], s);
    }
  }
  const double n = static_cast<double>(state.params());
  const double bandwidth = n * kStepBytesPerParam / limit_s;
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    const double bytes = StepBytesPerParam(format, bf16 == 1), limit_pps = bandwidth / bytes;
    const double pps = n / step_s[bf16];
    const std::string figure = std::string(bf16 == 1 ? "adamw_step_single_gradient" : "adamw_step") +
                               ".moments=" + FormatName(format) + "." + std::string(IsaName(isa)) +
                               ".threads=" + std::to_string(threads);
    if (o.json) {
      std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"params/s\",\"limit\":%.6g,"
                  "\"ratio\":%.4f,\"bytes_per_param\":%.4f,\"limit_bytes_per_s\":%.6g,"
                  "\"kernels\":\"%s\"}\n",
                  figure.c_str(), pps, limit_pps, pps / limit_pps, bytes, bandwidth,
                  KernelsName(isa).c_str());
    } else {
      std::printf("%-52s %8.3f Gparam/s %6.2f B/param %8.2f GB/s  ratio %.3f\n", figure.c_str(),
                  pps / 1e9, bytes, pps * bytes / 1e9, pps / limit_pps);
    }
  }
  return bandwidth / StepBytesPerParam(format);
}

// (e) for one format: the step at 1 thread on kInCacheParams parameters
// that stay in the core's cache (stepped kInCacheReps times), the rate of
// its arithmetic alone, against the memory limit of that format at 1
// thread (`limit_pps`): below 1, the format cannot reach its memory limit
// at 1 thread on this core, whatever the memory.
constexpr size_t kInCacheParams = 32768;
constexpr int kInCacheReps = 400;

void MeasureInCache(const Options& o, MomentFormat format, double limit_pps) {
  const Isa isa = SupportedIsas().back();
  CompactStepState state(kInCacheParams, format);
  state.Fill(1);
  StepParams adamw = AdamWParams();
  double best = 1e30;
  for (int r = 0; r <= o.reps; ++r) {
    const double start = ThreadCpuSeconds();
    for (int k = 0; k < kInCacheReps; ++k, ++adamw.t) StepBlock(isa, adamw, state.Block(0));
    const double s = ThreadCpuSeconds() - start;
    if (r > 0) best = std::min(best, s);
  }
  const double pps = static_cast<double>(kInCacheParams) * kInCacheReps / best;
  const std::string figure = std::string("adamw_step_in_cache.moments=") + FormatName(format) + "." +
                             std::string(IsaName(isa)) + ".threads=1";
  if (o.json) return PrintJson(figure, pps, "params/s", limit_pps);
  std::printf("%-52s %8.3f Gparam/s  ratio %.3f (to the memory limit at 1 thread)\n",
              figure.c_str(), pps / 1e9, pps / limit_pps);
}

// (e) for every format, at 1 thread and at o.max_threads.
bool MeasureFormats(const Options& o, const StepState& fp32) {
  for (MomentFormat format : {MomentFormat::kFp32, MomentFormat::kBf16, MomentFormat::kInt8}) {
    CompactStepState state(o.params, format);
    if (!state.ok()) {
      std::fprintf(stderr, "optimizer_bench: cannot allocate %zu params of %s state\n", o.params,
                   FormatName(format));
      return false;
    }
    state.Fill(o.max_threads);
    ReportPaths(o, format);
    const double limit_1 = MeasureFormat(o, 1, fp32, state, format);
    MeasureInCache(o, format, limit_1);
    if (o.max_threads > 1) MeasureFormat(o, o.max_threads, fp32, state, format);
  }
  return true;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  Options o;
  if (!ReadFlags(&o)) return 2;
  StepState state(o.params);
  if (!state.ok()) {
    std::fprintf(stderr, "optimizer_bench: cannot allocate %zu params\n", o.params);
    return 1;
  }
  state.Fill(o.max_threads);
  if (!o.json) {
    std::printf("optimizer_bench: %zu params in %zu blocks of %zu, %.0f bytes/param, best of %d, "
                "kernels %s\n",
                o.params, state.num_blocks(), kBenchBlockElems, kStepBytesPerParam, o.reps,
                KernelsName(SupportedIsas().back()).c_str());
  }
  if (!absl::GetFlag(FLAGS_formats_only)) {
    for (int t = 1; t <= o.max_threads; ++t) MeasureThreads(o, t, state);
  }
  return MeasureFormats(o, state) ? 0 : 1;
}

}  // namespace
}  // namespace zerostate::server

int main(int argc, char** argv) { return zerostate::server::Main(argc, argv); }
