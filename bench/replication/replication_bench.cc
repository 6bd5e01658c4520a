// replication_bench: what replicated shards cost and how fast a
// failover is, with real zerostate-server processes on loopback. A
// training step: two nodes push, node 0 asks GradStats and steps, both
// gather the new version. Three jobs of the same model over the same three
// servers, with k = 0, 1 and 2 backups per shard, stepped in turn.
//   replication.floor.k<K>.<stage>  the memory-traffic floor of the job
//                            with K backups on one host: the bytes per
//                            parameter each stage of its step reads and
//                            writes (replication_floor.h), .total,
//                            .primary_host (the backups' stages elsewhere)
//                            and .path (less the backups' passes)
//   replication.memory_bandwidth  this host's (optimizer_bench's
//                            TrafficPass, best of a few passes before the
//                            servers start)
//   replication.bound_k<K>_step_ms  the one-host bound: the floor's bytes x
//                            params / bandwidth
// Two settings, each on its own three servers:
//   path     the step's path alone: the backups acknowledge each step once
//            they hold it and apply none while the steps are timed
//            (--replica_lazy_apply, --replica_held_steps=steps+2)
//   inside   every pass inside the timed steps: the backups apply the
//            steps they hold as they come (the servers' defaults)
//   replication.<setting>.step_k<K>_ms  the step's median
//   replication.<setting>.k<K>_<phase>_ms  the mean per shard and step of
//                            the Step's phases (zerostate_step_phase_
//                            seconds: wait_gradients, optimizer; with
//                            backups also replicate, the hand-off before
//                            the pass, and backups, the wait for their
//                            acknowledgement after it)
//   replication.<setting>.k<K>_backups_behind_ms  once the trainer is
//                            done, the time the backups still take to
//                            apply the steps they hold (a read of every
//                            backup copy, which applies them first, less a
//                            second read): for `path` every timed step's
//                            passes (their catch-up), for `inside` the lag
//   replication.path.k<K>_floor_ratio  the floor's ratio of the same:
//                            .path over k0's (the backups' passes out, the
//                            sums' receive in: this one host), and
//                            _primary_host_floor_ratio (backups elsewhere)
//   replication.<setting>.k<K>_ratio  the median over the rounds (each
//                            steps the three jobs back to back, in turns
//                            first) of the round's step with K backups
//                            over its step with none, and _p25, _p75 its
//                            quartiles; path's limits: 1.15 and 1.3 on a
//                            host of 16 cores or more, else 1.4 for k = 1
//   replication.inside.k<K>_bound_ratio  bound_k<K> / bound_k0
//   replication.inside.k<K>_ratio_vs_bound  the two over each other (limit
//                            1.1)
//   replication.inside.k<K>_to_bound  step_k<K> / bound_k<K>
// Then, on the inside servers, with the k = 1 job:
//   replication.failover_s   a server SIGKILLed after node 0's pushes of a
//                            step, to the end of that step (its GradStats,
//                            Step and both gathers through the backup that
//                            took the shard over, which first applies the
//                            steps it holds; StaticMembership, so no lease
//                            to wait for: with etcd add the lease TTL);
//                            limit 2 s
//   replication.catchup_first_step_ms  then server 1 restarted empty: the
//                            step that finds it back and starts to catch
//                            its copies up
//   replication.catchup_first_step_ratio  that step over inside.step_k1_ms
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
// A model of --params fp32 parameters (one tensor per 4 Mi).
//   replication_bench [--json] [--params=16777216] [--steps=8] [--replica_lanes=0]
//                     [--settings=path,inside] [--server=PATH] [--server_flags=F,F]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/optimizer/step_state.h"
#include "bench/replication/replication_floor.h"
#include "client/client.h"
#include "common/shard_map.h"
#include "grpcpp/create_channel.h"
#include "zerostate/v1/replica.grpc.pb.h"
#include "tests/testing/server_process.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int64_t, params, 16 << 20, "model parameters");
ABSL_FLAG(std::string, server_flags, "",
          "more flags for every server, comma-separated (e.g. --replica_nice=10)");
ABSL_FLAG(int, steps, 8, "timed rounds per setting (medians are printed)");
ABSL_FLAG(int, replica_lanes, 0,
          "the servers' --replica_lanes (connections per backup for a step's sums; 0: theirs)");
ABSL_FLAG(std::string, settings, "path,inside",
          "which settings to run: path, inside or both (the failover and catch-up figures run "
          "with inside)");
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

// The value below which `q` of `v` lies (nearest rank; 0 when empty).
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

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

// One setting's medians: the step with k = 0, 1, 2 backups per shard, and
// of each round's step with k backups over its step with none (the three
// are stepped back to back in a round, so a load that comes and goes on
// the host moves both), with that ratio's quartiles.
struct Medians {
  double k[3] = {0, 0, 0};
  double ratio[3] = {1, 0, 0}, ratio_p25[3] = {1, 0, 0}, ratio_p75[3] = {1, 0, 0};
};

// Prints the ratios of `m` as replication.<setting>.k<K>_ratio (limit
// limit[K]: 0 for none) with _p25 and _p75.
void PrintRatios(const std::string& setting, const Medians& m, const double (&limit)[3]) {
  for (int k = 1; k <= 2; ++k) {
    const std::string name = absl::StrCat("replication.", setting, ".k", k, "_ratio");
    Print(name, m.ratio[k], "x", limit[k]);
    Print(name + "_p25", m.ratio_p25[k], "x", 0);
    Print(name + "_p75", m.ratio_p75[k], "x", 0);
  }
}

// ReadShard of `shard` of `job` from `server`, every block read and
// dropped: first the copy applies the steps it holds (HeldSteps).
void ReadShard(const std::string& server, const std::string& job, uint32_t shard) {
  auto stub =
      v1::ReplicaService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("zerostate-job-token", kToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::ReadShardRequest req;
  req.set_job_id(job);
  req.set_shard(shard);
  auto reader = stub->ReadShard(&ctx, req);
  v1::ShardBlock block;
  while (reader->Read(&block)) {
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) Fail(absl::StrCat("ReadShard from ", server, ": ", st.error_message()));
}

// Seconds to read every backup copy of `job` (k backups per shard) on
// `servers`, one copy after another.
double ReadBackups(const std::vector<std::string>& servers, const std::string& job, uint32_t k) {
  const absl::Time start = absl::Now();
  const uint32_t n = static_cast<uint32_t>(servers.size());
  for (uint32_t shard = 0; shard < n; ++shard) {
    const std::vector<uint32_t> copies = ReplicaServers(n, shard, k);
    for (size_t c = 1; c < copies.size(); ++c) ReadShard(servers[copies[c]], job, shard);
  }
  return Seconds(start);
}

// Three servers started with `server_args`; jobs with k = 0, 1, 2 stepped
// in turn, --steps times each after a warm-up; the medians printed as
// replication.<setting>.step_k<K>_ms with the Step's phases, then what the
// backups still had to apply once the trainer was done:
// replication.<setting>.k<K>_backups_behind_ms, the first read of every
// backup copy (it applies the steps the copy holds) less a second one.
// `keep` (may be null) gets the cluster and the k = 1 job, for the
// failover that follows.
Medians Measure(const std::string& setting, std::vector<std::string> server_args,
                std::unique_ptr<testing::ServerCluster>* keep, Run* keep_k1) {
  testing::ServerProcessOptions o;
  o.binary = absl::GetFlag(FLAGS_server);
  o.args = {"--metrics_listen=127.0.0.1:0", "--grace_seconds=1",
            absl::StrCat("--replica_lanes=", absl::GetFlag(FLAGS_replica_lanes))};
  for (std::string& a : server_args) o.args.push_back(std::move(a));
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_server_flags), ',', absl::SkipEmpty())) {
    o.args.emplace_back(f);
  }
  auto cluster = testing::ServerCluster::Start(3, o);
  if (!cluster.ok()) Fail(cluster.status().ToString());
  const auto servers = (*cluster)->addresses();
  std::vector<Run> runs;
  std::vector<std::string> ids;
  for (uint32_t k = 0; k <= 2; ++k) {
    ids.push_back(absl::StrCat("bench-", setting, "-k", k));
    runs.push_back(Open(servers, Spec(ids.back(), k)));
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<double> times[3];
  Phases before[3];
  for (int s = 0; s <= steps; ++s) {  // step 0 warms every job up
    for (int i = 0; i <= 2; ++i) {
      const int k = (s + i) % 3;  // each job first in a round as often as the others
      const absl::Time start = absl::Now();
      Step(runs[k], s);
      if (s > 0) times[k].push_back(Seconds(start));
      if (s == 0) before[k] = ReadPhases(**cluster, ids[k]);
    }
  }
  Medians m;
  for (int k = 0; k <= 2; ++k) {
    m.k[k] = Median(times[k]);
    Print(absl::StrCat("replication.", setting, ".step_k", k, "_ms"), m.k[k] * 1e3, "ms", 0);
    std::vector<double> ratios;
    for (int s = 0; s < steps; ++s) ratios.push_back(times[k][s] / times[0][s]);
    m.ratio[k] = Median(ratios);
    m.ratio_p25[k] = Quantile(ratios, 0.25);
    m.ratio_p75[k] = Quantile(ratios, 0.75);
  }
  for (int k = 0; k <= 2; ++k) {
    PrintPhases(absl::StrCat(setting, ".k", k), before[k], ReadPhases(**cluster, ids[k]));
  }
  for (uint32_t k = 1; k <= 2; ++k) {
    const double first = ReadBackups(servers, ids[k], k);
    const double again = ReadBackups(servers, ids[k], k);
    Print(absl::StrCat("replication.", setting, ".k", k, "_backups_behind_ms"),
          std::max(0.0, first - again) * 1e3, "ms", 0);
  }
  if (keep != nullptr) {
    *keep_k1 = std::move(runs[1]);
    *keep = *std::move(cluster);
  }
  return m;
}

// The one-host bound of the job with k backups: its floor's bytes
// (replication_floor.h) x params over `bandwidth`, in seconds.
double BoundSeconds(int k, double bandwidth) {
  return Totals(k).all * static_cast<double>(absl::GetFlag(FLAGS_params)) / bandwidth;
}

void PrintFloor(double bandwidth) {
  for (int k = 0; k <= 2; ++k) {
    for (const FloorStage& s : kFloorStages) {
      if (s.with(k) > 0) Print(absl::StrCat("replication.floor.k", k, ".", s.name), s.with(k),
                               "B/param", 0);
    }
    Print(absl::StrCat("replication.floor.k", k, ".total"), Totals(k).all, "B/param", 0);
    Print(absl::StrCat("replication.floor.k", k, ".primary_host"), Totals(k).primary_host,
          "B/param", 0);
    Print(absl::StrCat("replication.floor.k", k, ".path"), Totals(k).path, "B/param", 0);
  }
  Print("replication.memory_bandwidth", bandwidth / 1e9, "GB/s", 0);
  for (int k = 0; k <= 2; ++k) {
    Print(absl::StrCat("replication.bound_k", k, "_step_ms"), BoundSeconds(k, bandwidth) * 1e3,
          "ms", 0);
  }
}

// The settings --settings names (path, inside), failing on any other.
std::set<std::string> Settings() {
  std::set<std::string> settings;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_settings), ',')) {
    if (name != "path" && name != "inside") {
      Fail(absl::StrCat("--settings: unknown setting \"", name, "\" (path, inside)"));
    }
    settings.emplace(name);
  }
  return settings;
}

// The step's path: the backups hold each step and apply it only once the
// trainer is done (--replica_lazy_apply), so their passes stay out of the
// timed steps; what they still had to do is timed after them.
void MeasurePath() {
  const bool big = std::thread::hardware_concurrency() >= 16;
  const std::string held = absl::StrCat("--replica_held_steps=", absl::GetFlag(FLAGS_steps) + 2);
  const Medians path = Measure("path", {"--replica_lazy_apply", held}, nullptr, nullptr);
  PrintRatios("path", path, {0, big ? 1.15 : 1.4, big ? 1.3 : 0});
  // What the floor alone would make of the path's cost: on this one host,
  // where each backup's receive of the sums shares its memory, and with
  // the backups on hosts of their own (the primary's host pays the sends).
  for (int k = 1; k <= 2; ++k) {
    Print(absl::StrCat("replication.path.k", k, "_floor_ratio"), Totals(k).path / Totals(0).path,
          "x", 0);
    Print(absl::StrCat("replication.path.k", k, "_primary_host_floor_ratio"),
          Totals(k).primary_host / Totals(0).primary_host, "x", 0);
  }
}

// Every pass inside the timed steps (the backups apply as steps come, at
// most --replica_held_steps behind), against the one-host bound; then the
// failover and the catch-up on the same servers.
void MeasureInside(double bandwidth) {
  std::unique_ptr<testing::ServerCluster> cluster;
  Run k1;
  const Medians inside = Measure("inside", {}, &cluster, &k1);
  PrintRatios("inside", inside, {0, 0, 0});
  for (int k = 1; k <= 2; ++k) {
    const double ratio = inside.ratio[k];
    const double bound_ratio = BoundSeconds(k, bandwidth) / BoundSeconds(0, bandwidth);
    Print(absl::StrCat("replication.inside.k", k, "_bound_ratio"), bound_ratio, "x", 0);
    Print(absl::StrCat("replication.inside.k", k, "_ratio_vs_bound"), ratio / bound_ratio, "x",
          1.1);
  }
  for (int k = 0; k <= 2; ++k) {
    Print(absl::StrCat("replication.inside.k", k, "_to_bound"),
          inside.k[k] / BoundSeconds(k, bandwidth), "x", 0);
  }
  // Failover: server 1 dies after node 0's push of the next step.
  const int steps = absl::GetFlag(FLAGS_steps);
  absl::Time killed;
  Step(k1, steps + 1, [&] {
    if (!cluster->server(1).Kill().ok()) Fail("could not kill server 1");
    killed = absl::Now();
  });
  Print("replication.failover_s", Seconds(killed), "s", 2.0);
  CatchUp(*cluster, k1, steps + 2, inside.k[1]);
}

void Main() {
  const std::set<std::string> settings = Settings();
  // Before the servers start, so that nothing of the bench competes.
  const double bandwidth = MemoryBandwidth();
  PrintFloor(bandwidth);
  if (settings.count("path") > 0) MeasurePath();
  if (settings.count("inside") > 0) MeasureInside(bandwidth);
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  zerostate::bench::Main();
  return 0;
}
