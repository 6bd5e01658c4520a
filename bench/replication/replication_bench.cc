// replication_bench: what replicated shards cost and how fast a
// failover is, with real zerostate-server processes on loopback:
//   replication.step_ratio   a training step (two nodes push, node 0 asks
//                            GradStats and steps, both gather the new
//                            version) with one backup per shard, over the
//                            same step without backups, same servers,
//                            same run, steps alternating; limit 1.15
//   replication.step_k0_ms   the step without backups (median)
//   replication.step_k1_ms   the step with one backup per shard (median)
//   replication.k<K>_<phase>_ms  where the servers' part of those steps
//                            went: the mean per shard and step of the
//                            Step's phases (zerostate_step_phase_seconds:
//                            wait_gradients, optimizer; with a backup also
//                            replicate, the hand-off before the pass, and
//                            backups, the wait for their acknowledgement
//                            after it), over the timed steps
//   replication.floor.k<K>.<stage>  the memory-traffic floor of each job
//                            on one host: the bytes per parameter each
//                            stage of its step reads and writes in memory
//                            (replication_floor.h), and .total
//   replication.floor_bytes_ratio  the k = 1 job's total over the k = 0
//                            job's: the least step_ratio one host's memory
//                            allows when the step is bound by it
//   replication.floor_bytes_ratio_backup_elsewhere  the same with only the
//                            k = 1 job's bytes on the primary's host (the
//                            backup on another host)
//   replication.step_ratio_vs_floor  step_ratio / floor_bytes_ratio
//   replication.memory_bandwidth  this host's (optimizer_bench's
//                            TrafficPass, best of a few passes before the
//                            servers start; --memory_limit=false: none)
//   replication.floor_k<K>_step_ms  the floor's bytes x params / bandwidth
//   replication.k<K>_to_floor  step_k<K>_ms / floor_k<K>_step_ms
//   replication.failover_s   a server SIGKILLed after node 0's pushes of a
//                            step, to the end of that step (its GradStats,
//                            Step and both gathers through the backup that
//                            took the shard over; StaticMembership, so no
//                            lease to wait for); limit 2 s, the goal
//                            after lease expiry
//   replication.catchup_first_step_ms  then server 1 restarted empty: the
//                            step that finds it back and starts to catch
//                            its copies up (the shard's state read before
//                            the pass; the seed crosses in the background)
//   replication.catchup_first_step_ratio  that step over step_k1_ms
//   replication.catchup_steps  steps run until no shard is under-replicated
//                            (zerostate_under_replicated_blocks 0 on every
//                            server), that one included
//   replication.catchup_s    from that step's start to the end of the last
//                            of them
//   replication.catchup_max_step_ms  the slowest of those steps
//   replication.catchup_backlog_peak_mb  the most the catch-ups held of the
//                            steps decided meanwhile (zerostate_catchup_
//                            backlog_bytes summed over the servers, read
//                            after each step)
// Three servers, a model of --params fp32 parameters (one tensor per 4 Mi).
//   replication_bench [--json] [--params=16777216] [--steps=8] [--replica_lanes=0]
//                     [--memory_limit=true] [--server=PATH]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/optimizer/step_state.h"
#include "bench/replication/replication_floor.h"
#include "client/client.h"
#include "tests/testing/server_process.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int64_t, params, 16 << 20, "model parameters");
ABSL_FLAG(int, steps, 8, "timed steps per setting (the median is printed)");
ABSL_FLAG(int, replica_lanes, 0,
          "the servers' --replica_lanes (connections per backup for a step's sums; 0: theirs)");
ABSL_FLAG(bool, memory_limit, true,
          "measure this host's memory bandwidth (a few passes over min(params, 64 Mi) parameters' "
          "AdamW state) for the floor in ms");
ABSL_FLAG(std::string, server, ZEROSTATE_SERVER_PATH,
          "the zerostate-server binary the bench starts (default: this build's)");

namespace zerostate::bench {
namespace {

constexpr uint32_t kNodes = 2;
constexpr char kToken[] = "replication-bench-token-0123456789abcdef";

void Print(const std::string& figure, double value, const std::string& unit, double limit) {
  if (absl::GetFlag(FLAGS_json)) {
    std::string lim = limit > 0 ? absl::StrCat(limit) : "null";
    std::string ratio = limit > 0 ? absl::StrCat(value / limit) : "null";
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%s,\"ratio\":%s}\n",
                figure.c_str(), value, unit.c_str(), lim.c_str(), ratio.c_str());
  } else {
    std::printf("%-28s %10.3f %s%s\n", figure.c_str(), value, unit.c_str(),
                limit > 0
                    ? absl::StrFormat("  (limit %.3f, ratio %.3f)", limit, value / limit).c_str()
                    : "");
  }
  std::fflush(stdout);
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "replication_bench: %s\n", what.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

v1::JobSpec Spec(const std::string& id, uint32_t replicas) {
  v1::JobSpec spec;
  spec.set_job_id(id);
  int64_t left = absl::GetFlag(FLAGS_params);
  for (int i = 0; left > 0; ++i) {
    auto* t = spec.add_tensors();
    t->set_name(absl::StrCat("w", i));
    t->add_shape(std::min<int64_t>(left, 4 << 20));
    left -= 4 << 20;
  }
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(kNodes);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_seed(7);
  spec.set_replicas(replicas);
  return spec;
}

// A job's two nodes, each with its client, gradient and weights buffers.
struct Run {
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::JobClient>> nodes;
  std::vector<std::vector<float>> grads, weights;
};

Run Open(const std::vector<std::string>& servers, const v1::JobSpec& spec) {
  Run run;
  for (uint32_t n = 0; n < kNodes; ++n) {
    client::ClientOptions o;
    o.servers = servers;
    o.plaintext = true;
    o.job_token = kToken;
    o.failover_wait = std::chrono::milliseconds(300);
    o.initial_backoff = std::chrono::milliseconds(5);
    o.max_backoff = std::chrono::milliseconds(50);
    auto c = client::Client::Connect(o);
    if (!c.ok()) Fail(c.status().ToString());
    auto j = n == 0 ? (*c)->RegisterJob(spec) : (*c)->AttachJob(spec.job_id());
    if (!j.ok()) Fail(j.status().ToString());
    const uint64_t used = (*j)->layout().used_elems;
    run.grads.emplace_back(used);
    for (uint64_t i = 0; i < used; ++i)
      run.grads[n][i] = 1e-3f * static_cast<float>((i * 7 + n) % 101);
    run.weights.emplace_back((*j)->layout().total_elems);
    run.clients.push_back(*std::move(c));
    run.nodes.push_back(*std::move(j));
  }
  return run;
}

// One trainer step; `after_push` runs on node 0 once its push is in.
void Step(Run& run, uint64_t step, const std::function<void()>& after_push = nullptr) {
  std::vector<absl::Status> result(kNodes);
  std::vector<std::thread> threads;
  for (uint32_t n = 0; n < kNodes; ++n) {
    threads.emplace_back([&, n] {
      client::JobClient& job = *run.nodes[n];
      absl::Status s =
          job.Push(step, n, {0, job.layout().used_elems}, run.grads[n].data(), v1::DTYPE_FP32);
      if (s.ok() && n == 0) {
        if (after_push) after_push();
        auto stats = job.GradStats(step);
        s = stats.ok() ? job.Step(step, 1e-3f, 1.0f / kNodes, false) : stats.status();
      }
      if (s.ok()) {
        s = job.Gather(step + 1, {0, job.layout().total_elems}, run.weights[n].data(),
                       v1::DTYPE_FP32);
      }
      result[n] = s;
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t n = 0; n < kNodes; ++n) {
    if (!result[n].ok()) Fail(absl::StrCat("step ", step, " node ", n, ": ", result[n].ToString()));
  }
}

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

// The Step phases' seconds and counts of `job`, summed over the servers.
struct Phases {
  std::map<std::string, std::pair<double, double>> by_name;  // phase -> (sum, count)
};
constexpr const char* kPhases[] = {"wait_gradients", "optimizer", "replicate", "backups"};

Phases ReadPhases(testing::ServerCluster& cluster, const std::string& job) {
  Phases p;
  for (int i = 0; i < cluster.size(); ++i) {
    auto page = testing::ScrapeMetrics(cluster.server(i).metrics_address(), absl::Seconds(10));
    if (!page.ok()) Fail(page.status().ToString());
    for (const char* phase : kPhases) {
      const std::string labels = absl::StrCat("{job_id=\"", job, "\",phase=\"", phase, "\"}");
      const double sum = testing::MetricValue(*page, "zerostate_step_phase_seconds_sum" + labels);
      const double count =
          testing::MetricValue(*page, "zerostate_step_phase_seconds_count" + labels);
      if (sum < 0 || count < 0) continue;  // not observed (yet)
      p.by_name[phase].first += sum;
      p.by_name[phase].second += count;
    }
  }
  return p;
}

// Prints each phase's mean between `before` and `after` as
// replication.<prefix>_<phase>_ms.
void PrintPhases(const std::string& prefix, const Phases& before, const Phases& after) {
  for (const char* phase : kPhases) {
    auto a = after.by_name.find(phase);
    if (a == after.by_name.end()) continue;
    auto b = before.by_name.find(phase);
    const double sum = a->second.first - (b == before.by_name.end() ? 0 : b->second.first);
    const double count = a->second.second - (b == before.by_name.end() ? 0 : b->second.second);
    if (count > 0)
      Print(absl::StrCat("replication.", prefix, "_", phase, "_ms"), sum / count * 1e3, "ms", 0);
  }
}

// Series `name` summed over the running servers (0 where missing).
double Total(testing::ServerCluster& cluster, const std::string& name) {
  double total = 0;
  for (int i = 0; i < cluster.size(); ++i) {
    if (!cluster.server(i).running()) continue;
    auto page = testing::ScrapeMetrics(cluster.server(i).metrics_address(), absl::Seconds(10));
    if (!page.ok()) Fail(page.status().ToString());
    total += std::max(0.0, testing::MetricValue(*page, name));
  }
  return total;
}

// Server 1 (killed) restarted empty; steps of `run` from `step` until its
// copies are live again. `step_s`: the median step's seconds.
void CatchUp(testing::ServerCluster& cluster, Run& run, uint64_t step, double step_s) {
  if (!cluster.server(1).Restart().ok()) Fail("could not restart server 1");
  constexpr int kMaxSteps = 50;
  std::vector<double> times;
  double peak = 0;
  const absl::Time begin = absl::Now();
  while (times.empty() || Total(cluster, "zerostate_under_replicated_blocks") > 0) {
    if (times.size() == kMaxSteps) Fail("server 1's copies were not caught up in 50 steps");
    const absl::Time start = absl::Now();
    Step(run, step++);
    times.push_back(Seconds(start));
    peak = std::max(peak, Total(cluster, "zerostate_catchup_backlog_bytes"));
  }
  const double all = Seconds(begin);
  Print("replication.catchup_first_step_ms", times[0] * 1e3, "ms", 0);
  Print("replication.catchup_first_step_ratio", times[0] / step_s, "x", 0);
  Print("replication.catchup_steps", static_cast<double>(times.size()), "steps", 0);
  Print("replication.catchup_s", all, "s", 0);
  Print("replication.catchup_max_step_ms", *std::max_element(times.begin(), times.end()) * 1e3,
        "ms", 0);
  Print("replication.catchup_backlog_peak_mb", peak / (1 << 20), "MiB", 0);
}

// This host's memory bandwidth in bytes/s: optimizer_bench's limit (an
// AdamW step's traffic without its arithmetic), every core, best of 3.
double MemoryBandwidth() {
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  server::StepState state(std::min<int64_t>(absl::GetFlag(FLAGS_params), int64_t{64} << 20));
  if (!state.ok()) Fail("could not allocate the memory limit's state");
  state.Fill(threads);
  return server::MemoryLimitParamsPerSecond(state, threads, 3) * server::kStepBytesPerParam;
}

// The floor's figures (replication_floor.h) against the measured medians;
// `bandwidth` 0: bytes only.
void PrintFloor(double step_k0_s, double step_k1_s, double bandwidth) {
  for (const FloorStage& s : kFloorStages) {
    if (s.k0 > 0) Print(absl::StrCat("replication.floor.k0.", s.name), s.k0, "B/param", 0);
  }
  for (const FloorStage& s : kFloorStages) {
    if (s.k1 > 0) Print(absl::StrCat("replication.floor.k1.", s.name), s.k1, "B/param", 0);
  }
  constexpr FloorTotals t = Totals();
  Print("replication.floor.k0.total", t.k0, "B/param", 0);
  Print("replication.floor.k1.total", t.k1, "B/param", 0);
  Print("replication.floor_bytes_ratio", t.k1 / t.k0, "x", 0);
  Print("replication.floor_bytes_ratio_backup_elsewhere", t.k1_primary_host / t.k0, "x", 0);
  Print("replication.step_ratio_vs_floor", step_k1_s / step_k0_s / (t.k1 / t.k0), "x", 0);
  if (bandwidth <= 0) return;
  const double params = static_cast<double>(absl::GetFlag(FLAGS_params));
  const double floor_k0_s = t.k0 * params / bandwidth, floor_k1_s = t.k1 * params / bandwidth;
  Print("replication.memory_bandwidth", bandwidth / 1e9, "GB/s", 0);
  Print("replication.floor_k0_step_ms", floor_k0_s * 1e3, "ms", 0);
  Print("replication.floor_k1_step_ms", floor_k1_s * 1e3, "ms", 0);
  Print("replication.k0_to_floor", step_k0_s / floor_k0_s, "x", 0);
  Print("replication.k1_to_floor", step_k1_s / floor_k1_s, "x", 0);
}

void Main() {
  // Before the servers start, so that nothing of the bench competes.
  const double bandwidth = absl::GetFlag(FLAGS_memory_limit) ? MemoryBandwidth() : 0;
  testing::ServerProcessOptions o;
  o.binary = absl::GetFlag(FLAGS_server);
  o.args = {"--metrics_listen=127.0.0.1:0", "--grace_seconds=1",
            absl::StrCat("--replica_lanes=", absl::GetFlag(FLAGS_replica_lanes))};
  auto cluster = testing::ServerCluster::Start(3, o);
  if (!cluster.ok()) Fail(cluster.status().ToString());
  const auto servers = (*cluster)->addresses();
  Run k0 = Open(servers, Spec("bench-k0", 0));
  Run k1 = Open(servers, Spec("bench-k1", 1));
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<double> t0, t1;
  Phases k0_before, k1_before;
  for (int s = 0; s <= steps; ++s) {  // step 0 warms both up
    absl::Time start = absl::Now();
    Step(k0, s);
    if (s > 0) t0.push_back(Seconds(start));
    start = absl::Now();
    Step(k1, s);
    if (s > 0) t1.push_back(Seconds(start));
    if (s == 0) {
      k0_before = ReadPhases(**cluster, "bench-k0");
      k1_before = ReadPhases(**cluster, "bench-k1");
    }
  }
  const double m0 = Median(t0), m1 = Median(t1);
  Print("replication.step_k0_ms", m0 * 1e3, "ms", 0);
  Print("replication.step_k1_ms", m1 * 1e3, "ms", 0);
  Print("replication.step_ratio", m1 / m0, "x", 1.15);
  PrintPhases("k0", k0_before, ReadPhases(**cluster, "bench-k0"));
  PrintPhases("k1", k1_before, ReadPhases(**cluster, "bench-k1"));
  PrintFloor(m0, m1, bandwidth);
  // Failover: server 1 dies after node 0's push of the next step.
  absl::Time killed;
  Step(k1, steps + 1, [&] {
    if (!(*cluster)->server(1).Kill().ok()) Fail("could not kill server 1");
    killed = absl::Now();
  });
  Print("replication.failover_s", Seconds(killed), "s", 2.0);
  CatchUp(**cluster, k1, steps + 2, m1);
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  zerostate::bench::Main();
  return 0;
}
