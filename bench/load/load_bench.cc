// load_bench: many trainer processes against 2 real zerostate-server
// processes with a RAM budget.
//
// It starts --servers servers with --ram_budget_mib, registers --jobs jobs
// of --params parameters (AdamW, bf16 gradients and weights) and --nodes
// nodes each, and starts one load_client process per (job, node, local
// rank): --jobs x --nodes x --local_ranks processes (64 by default), each
// with one connection to every server. All start together; each step every
// process pushes its slice of its node's gradient, the job's first process
// applies the step, and every process gathers its slice of the new weights.
//
// Before the load, one process alone makes the same calls (a one-node job
// of params/local_ranks parameters): the unloaded figures, measured in the
// same run, that the loaded ones are compared with.
//
// It prints throughput (push + gather payload over the wall time of the
// run, against the process alone; and steps per second over all jobs),
// p50/p99 latency of push, step (which includes waiting for the job's
// slowest push) and gather against those alone, each server's memory
// high-water mark (VmHWM) against the budget, and the exactly-once check:
// every job's version equals --steps and its weights equal a reference
// computed here, bit for bit (verify.h). --json prints one object per
// figure: {"figure":..., "value":..., "unit":..., "limit":..., "ratio":...}
// (limit null where there is none). Exit status 1 when a check fails or a
// server's VmHWM exceeds the budget.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/load/child_process.h"
#include "bench/load/proc_status.h"
#include "bench/load/report.h"
#include "bench/load/verify.h"
#include "client/client.h"
#include "tests/testing/server_process.h"

ABSL_FLAG(int, servers, 2, "state server processes");
ABSL_FLAG(int, jobs, 2, "jobs");
ABSL_FLAG(int, nodes, 4, "nodes per job");
ABSL_FLAG(int, local_ranks, 8, "client processes per node");
ABSL_FLAG(int64_t, params, int64_t{4} << 20, "parameters per job (two 2-D tensors)");
ABSL_FLAG(int, steps, 20, "steps per job");
ABSL_FLAG(double, lr, 1e-3, "learning rate");
ABSL_FLAG(int, streams, 2, "ClientOptions::streams_per_server of each client process");
ABSL_FLAG(bool, data_plane, true,
          "ClientOptions::data_plane of each client process (false: push and gather over gRPC)");
ABSL_FLAG(int64_t, ram_budget_mib, 256, "each server's --ram_budget_bytes, in MiB");
ABSL_FLAG(int, server_threads, 2, "zerostate-server --threads");
ABSL_FLAG(int, timeout_s, 600, "longest the clients may take to start, and to finish");
ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(std::string, server_binary, ZEROSTATE_SERVER_PATH, "the zerostate-server to start");
ABSL_FLAG(std::string, client_binary, LOAD_CLIENT_PATH, "the load_client to start");

namespace zerostate::bench {
namespace {

namespace v1 = ::zerostate::v1;

void Print(const std::string& figure, double value, const std::string& unit, double limit,
           const std::string& text) {
  if (absl::GetFlag(FLAGS_json)) {
    std::string lim = limit > 0 ? absl::StrCat(limit) : "null";
    std::string ratio = limit > 0 ? absl::StrCat(value / limit) : "null";
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%s,\"ratio\":%s}\n",
                figure.c_str(), value, unit.c_str(), lim.c_str(), ratio.c_str());
  } else {
    std::printf("%-24s %s\n", figure.c_str(), text.c_str());
  }
  std::fflush(stdout);
}

// Latency under load; the limit is the same quantile of one process alone.
void PrintLatency(const std::string& op, const std::vector<int64_t>& us,
                  const std::vector<int64_t>& alone_us) {
  const double p50 = Quantile(us, 0.50) / 1e3, p99 = Quantile(us, 0.99) / 1e3;
  const double a50 = Quantile(alone_us, 0.50) / 1e3, a99 = Quantile(alone_us, 0.99) / 1e3;
  if (absl::GetFlag(FLAGS_json)) {
    Print(absl::StrCat("load.", op, ".p50"), p50, "ms", a50, "");
    Print(absl::StrCat("load.", op, ".p99"), p99, "ms", a99, "");
  } else {
    Print(op + " latency", 0, "", 0,
          absl::StrFormat("p50 %8.2f ms  p99 %8.2f ms  (%zu calls); alone p50 %.2f ms  p99 %.2f ms",
                          p50, p99, us.size(), a50, a99));
  }
}

// A job of `params` parameters in two 2-D tensors, AdamW, bf16 on the wire.
v1::JobSpec LoadSpec(const std::string& id, int64_t params, int nodes, uint64_t seed) {
  const int64_t half = params / 2;
  v1::JobSpec spec;
  spec.set_job_id(id);
  auto* a = spec.add_tensors();
  a->set_name("a");
  a->add_shape(1000);
  a->add_shape(std::max<int64_t>(1, half / 1000));
  auto* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(std::max<int64_t>(1, half / 1000 - 1));  // b does not end on a block
  b->add_shape(1000);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.mutable_optimizer()->set_weight_decay(0.01f);
  spec.set_num_nodes(nodes);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_seed(seed);
  return spec;
}

// Who runs: one client process per (job, node, local rank).
struct Topology {
  std::vector<std::string> jobs;
  int nodes = 1;
  int local_ranks = 1;
};

// What a run of RunClients measured.
struct Run {
  ClientReport all;  // every client's latencies and bytes, concatenated
  double wall_s = 0;  // from go to the last report
  double GBps() const { return (all.pushed_bytes + all.gathered_bytes) / wall_s / 1e9; }
};

// Starts every client, hands it the jobs' token (one Client registered them
// all, so they share it), waits until all are connected, says go, and collects
// their reports.
absl::Status RunClients(const std::vector<std::string>& servers, const std::string& token,
                        const Topology& topology, Run* run) {
  ClientReport* all = &run->all;
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (const std::string& job : topology.jobs) {
    for (int n = 0; n < topology.nodes; ++n) {
      for (int r = 0; r < topology.local_ranks; ++r) {
        absl::StatusOr<std::unique_ptr<ChildProcess>> c = ChildProcess::Spawn({
            absl::GetFlag(FLAGS_client_binary),
            absl::StrCat("--servers=", absl::StrJoin(servers, ",")),
            absl::StrCat("--job=", job),
            absl::StrCat("--node=", n),
            absl::StrCat("--local_rank=", r),
            absl::StrCat("--local_ranks=", topology.local_ranks),
            absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
            absl::StrCat("--lr=", absl::GetFlag(FLAGS_lr)),
            absl::StrCat("--streams=", absl::GetFlag(FLAGS_streams)),
            absl::StrCat("--data_plane=", absl::GetFlag(FLAGS_data_plane) ? "true" : "false"),
        });
        if (!c.ok()) return c.status();
        if (absl::Status s = (*c)->WriteLine(token); !s.ok()) return s;
        clients.push_back(*std::move(c));
      }
    }
  }
  absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  for (auto& c : clients) {
    absl::StatusOr<std::string> line = c->ReadLine(deadline);
    if (!line.ok()) return line.status();
    if (*line != kReady) {
      return absl::InternalError(absl::StrCat("client ", c->pid(), " said '", *line, "'"));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& c : clients) {
    if (absl::Status s = c->WriteLine(kGo); !s.ok()) return s;
  }
  deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  for (auto& c : clients) {
    absl::StatusOr<ClientReport> r =
        ClientReport::Parse([&] { return c->ReadLine(deadline); });
    if (!r.ok()) return r.status();
    for (auto [from, to] : {std::pair{&r->push_us, &all->push_us},
                            std::pair{&r->step_us, &all->step_us},
                            std::pair{&r->gather_us, &all->gather_us}}) {
      to->insert(to->end(), from->begin(), from->end());
    }
    all->pushed_bytes += r->pushed_bytes;
    all->gathered_bytes += r->gathered_bytes;
  }
  run->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& c : clients) {
    if (absl::Status s = c->Wait(deadline); !s.ok()) return s;
  }
  return absl::OkStatus();
}

int Main() {
  const uint64_t budget = static_cast<uint64_t>(absl::GetFlag(FLAGS_ram_budget_mib)) << 20;
  testing::ServerProcessOptions so;
  so.binary = absl::GetFlag(FLAGS_server_binary);
  so.args = {"--metrics_listen=", absl::StrCat("--threads=", absl::GetFlag(FLAGS_server_threads)),
             absl::StrCat("--ram_budget_bytes=", budget)};
  auto cluster = testing::ServerCluster::Start(absl::GetFlag(FLAGS_servers), so);
  if (!cluster.ok()) return std::fprintf(stderr, "servers: %s\n", cluster.status().ToString().c_str()), 1;
  client::ClientOptions co;
  co.servers = (*cluster)->addresses();
  co.plaintext = true;
  auto c = client::Client::Connect(co);
  if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().ToString().c_str()), 1;
  // The load's jobs, and "alone": one node of one process that makes the
  // same calls as each load process (1/local_ranks of a job), run first by
  // itself: the unloaded figures the loaded ones are compared with.
  const int64_t params = absl::GetFlag(FLAGS_params);
  const int nodes = absl::GetFlag(FLAGS_nodes), ranks = absl::GetFlag(FLAGS_local_ranks);
  std::vector<std::unique_ptr<client::JobClient>> jobs;
  Topology alone{{"alone"}, 1, 1}, load{{}, nodes, ranks};
  for (int j = 0; j <= absl::GetFlag(FLAGS_jobs); ++j) {
    const bool solo = j == absl::GetFlag(FLAGS_jobs);
    const std::string id = solo ? "alone" : absl::StrCat("load-", j);
    auto job = (*c)->RegisterJob(LoadSpec(id, solo ? params / ranks : params, solo ? 1 : nodes, 1000 + j));
    if (!job.ok()) return std::fprintf(stderr, "register %s: %s\n", id.c_str(), job.status().ToString().c_str()), 1;
    if (!solo) load.jobs.push_back(id);
    jobs.push_back(*std::move(job));
  }
  std::vector<uint64_t> rss_before;
  for (int i = 0; i < (*cluster)->size(); ++i) {
    rss_before.push_back(ProcStatusBytes((*cluster)->server(i).pid(), "VmRSS").value_or(0));
  }

  const int processes =
      absl::GetFlag(FLAGS_jobs) * absl::GetFlag(FLAGS_nodes) * absl::GetFlag(FLAGS_local_ranks);
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("load: %d servers, %d jobs x %d nodes x %d ranks = %d client processes, "
                "%lld params/job (AdamW, bf16 wire), %d steps, budget %llu MiB/server\n",
                (*cluster)->size(), absl::GetFlag(FLAGS_jobs), absl::GetFlag(FLAGS_nodes),
                absl::GetFlag(FLAGS_local_ranks), processes,
                static_cast<long long>(absl::GetFlag(FLAGS_params)), absl::GetFlag(FLAGS_steps),
                static_cast<unsigned long long>(budget >> 20));
  }
  Run solo, loaded;
  for (auto [topology, run] : {std::pair{&alone, &solo}, std::pair{&load, &loaded}}) {
    if (absl::Status s = RunClients((*cluster)->addresses(), jobs[0]->token(), *topology, run);
        !s.ok()) {
      return std::fprintf(stderr, "clients of %s: %s\n", topology->jobs[0].c_str(),
                          s.ToString().c_str()), 1;
    }
  }
  const ClientReport& all = loaded.all;
  const double steps_per_s = absl::GetFlag(FLAGS_jobs) * absl::GetFlag(FLAGS_steps) / loaded.wall_s;
  Print("load.throughput", loaded.GBps(), "GB/s", solo.GBps(),
        absl::StrFormat("%7.3f GB/s push+gather payload (%.0f MB in %.2f s); one process "
                        "alone: %.3f GB/s",
                        loaded.GBps(), (all.pushed_bytes + all.gathered_bytes) / 1e6,
                        loaded.wall_s, solo.GBps()));
  Print("load.steps_per_s", steps_per_s, "steps/s", 0,
        absl::StrFormat("%7.2f steps/s over all jobs", steps_per_s));
  PrintLatency("push", all.push_us, solo.all.push_us);
  PrintLatency("step", all.step_us, solo.all.step_us);
  PrintLatency("gather", all.gather_us, solo.all.gather_us);

  int failed = 0;
  for (int i = 0; i < (*cluster)->size(); ++i) {
    absl::StatusOr<uint64_t> hwm = ProcStatusBytes((*cluster)->server(i).pid(), "VmHWM");
    if (!hwm.ok()) return std::fprintf(stderr, "%s\n", hwm.status().ToString().c_str()), 1;
    const double mib = *hwm / 1048576.0;
    Print(absl::StrCat("load.server", i, ".vm_hwm"), mib, "MiB", budget / 1048576.0,
          absl::StrFormat("VmHWM %7.1f MiB (VmRSS %.1f MiB before the load)  budget %llu MiB  "
                          "ratio %.3f%s",
                          mib, rss_before[i] / 1048576.0,
                          static_cast<unsigned long long>(budget >> 20), *hwm / double(budget),
                          *hwm > budget ? "  OVER THE BUDGET" : ""));
    failed += *hwm > budget;
  }
  for (auto& job : jobs) {
    absl::Status s = VerifyExactlyOnce(*job, absl::GetFlag(FLAGS_steps),
                                       static_cast<float>(absl::GetFlag(FLAGS_lr)));
    Print(absl::StrCat("load.", job->spec().job_id(), ".exactly_once"), s.ok() ? 1 : 0, "bool", 1,
          s.ok() ? absl::StrFormat("version %d == steps; masters and bf16 weights equal the "
                                   "reference bit for bit",
                                   absl::GetFlag(FLAGS_steps))
                 : "FAILED: " + s.ToString());
    failed += !s.ok();
  }
  jobs.clear();
  c->reset();
  if (absl::Status s = (*cluster)->StopAll(); !s.ok()) {
    std::fprintf(stderr, "stopping the servers: %s\n", s.ToString().c_str());
    ++failed;
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return zerostate::bench::Main();
}
