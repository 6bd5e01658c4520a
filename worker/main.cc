// zerostate-worker: trains the built-in MLP through the state service.
// One process per rank (launcher variables as torchrun's, local ranks
// exchanging through shared memory), or --local_threads=L ranks as threads
// of one process. See worker/trainer.h and docs/architecture.md.
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/metrics_exposer.h"
#include "common/timeline.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "worker/config.h"
#include "worker/launch_env.h"
#include "worker/metrics.h"
#include "worker/progress.h"
#include "worker/test_pause.h"
#include "worker/trainer.h"
#ifdef ZEROSTATE_WITH_CUDA
#include "worker/cuda/cuda_backend.h"
#endif

ABSL_FLAG(std::string, config, "", "worker config: text format, or a DeepSpeed ds_config.json");
ABSL_FLAG(std::string, servers, "", "state servers host:port,... (overrides the config)");
ABSL_FLAG(uint64_t, steps, 0, "optimizer steps to run (0: from the config)");
ABSL_FLAG(std::string, job_id, "", "job id (overrides the config)");
ABSL_FLAG(uint32_t, local_threads, 0, "run this many local ranks as threads of this process");
ABSL_FLAG(int32_t, metrics_port, -1, "Prometheus port of local rank 0 (-1: config; 0: off)");
ABSL_FLAG(std::string, run_id, "", "id of this run (default: $TORCHELASTIC_RUN_ID, else the config's)");
ABSL_FLAG(std::string, backend, "cpu", "cpu, or cuda (one GPU per local rank, NCCL inside the node)");
ABSL_FLAG(std::string, dump_weights, "", "rank 0 writes the final fp32 master weights here");
ABSL_FLAG(uint64_t, checkpoint_every, 0,
          "rank 0 checkpoints the job every N steps (and at the start) under --checkpoint_dir, and "
          "rolls every rank back to the last one when a server restarts (0: off)");
ABSL_FLAG(std::string, checkpoint_dir, "", "absolute directory every state server reaches");
ABSL_FLAG(int64_t, keep_checkpoints, 2,
          "rank 0 deletes the job's checkpoints older than the newest K once a new one is "
          "complete (0: keep all); rank 0 must see --checkpoint_dir at the servers' path");
ABSL_FLAG(double, peer_timeout_seconds, 600,
          "a rank that waits this long on a peer that does not come names it and exits "
          "non-zero (0: wait forever); keep it above the slowest step and checkpoint");
ABSL_FLAG(double, server_wait_seconds, 300,
          "how long a state server may be unreachable (restarting, its pod rescheduled) before "
          "the run fails; every call and the rollback wait this long for it to come back");
ABSL_FLAG(std::string, test_pause, "",
          "testing: PHASE:STEP:FILE stops rank 0 before that phase (push, step, gather, "
          "checkpoint) of that step until FILE exists, so a fault test lands a kill there");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA of the state servers' certificates (TLS)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers that require one (mTLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(bool, plaintext, false, "talk to the state servers without TLS (servers on --plaintext)");
ABSL_FLAG(int64_t, delayed_update_warmup, -1,
          "delayed parameter update (ZeRO-Offload's DPU) after this many synchronous steps "
          "(train.delayed_update; -1: the config's, off by default)");
ABSL_FLAG(std::string, gradient_wire, "",
          "int8: push gradients as int8 in groups of 256 with one scale each, with error "
          "feedback (JobSpec.gradient_wire, docs/wire.md); plain: the grad dtype; empty: the "
          "config's");
ABSL_FLAG(std::string, weight_wire, "",
          "int8: gather weights as int8 in groups of 256 (JobSpec.weight_wire); plain: the "
          "weight dtype; empty: the config's");
ABSL_FLAG(int32_t, streams_per_server, 0,
          "streams (connections) per server of each push and gather, each on a thread of "
          "its own (0: the client's default, 4, raised by --same_host_streams_per_server "
          "and under TLS without kTLS)");
ABSL_FLAG(int32_t, same_host_streams_per_server, -1,
          "streams per server when every server is on this host, the same-host plane on "
          "(-1: the client's default, 8; 0: not raised past --streams_per_server); never "
          "more streams over all servers than the host's cores");
ABSL_FLAG(bool, shared_staging, true,
          "push and gather staging in memory shared with the state servers on this host, "
          "which read and write it in place (false: the backend's own memory, which the "
          "client copies into and out of the same-host plane's segments)");
ABSL_FLAG(std::string, timeline, "",
          "write a timeline of this process's step events (step, compute end, pushes, the "
          "coordinator's Step, each bucket's landing; CLOCK_MONOTONIC ns, JSON lines) to this "
          "file at the end (bench/step/timeline.py merges it with the servers' --timeline)");
ABSL_FLAG(bool, data_shm, true,
          "servers on this host: push and gather through shared memory (false: over their TCP "
          "data plane, as from another host; the int8 wire is bypassed on shared memory)");
ABSL_FLAG(bool, data_plane, true,
          "push and gather over the servers' TCP data plane, under TLS when the servers are "
          "(false: over gRPC)");

namespace zerostate::worker {
namespace {

absl::StatusOr<v1::WorkerConfig> LoadConfig(const Topology& topo) {
  v1::WorkerConfig config;
  if (const std::string path = absl::GetFlag(FLAGS_config); !path.empty()) {
    auto loaded = LoadConfigFile(path);
    if (!loaded.ok()) return loaded.status();
    for (const auto& w : loaded->warnings) {
      if (topo.rank() == 0) std::fprintf(stderr, "warning: %s\n", w.c_str());
    }
    config = loaded->config;
  }
  if (const std::string s = absl::GetFlag(FLAGS_servers); !s.empty()) {
    config.mutable_cluster()->clear_servers();
    for (auto addr : absl::StrSplit(s, ',', absl::SkipEmpty())) config.mutable_cluster()->add_servers(std::string(addr));
  }
  if (absl::GetFlag(FLAGS_steps) != 0) config.mutable_train()->set_steps(absl::GetFlag(FLAGS_steps));
  if (!absl::GetFlag(FLAGS_job_id).empty()) config.mutable_train()->set_job_id(absl::GetFlag(FLAGS_job_id));
  if (const int64_t warmup = absl::GetFlag(FLAGS_delayed_update_warmup); warmup >= 0) {
    if (warmup > UINT32_MAX) return absl::InvalidArgumentError("--delayed_update_warmup: too large");
    config.mutable_train()->mutable_delayed_update()->set_enabled(true);
    config.mutable_train()->mutable_delayed_update()->set_warmup_steps(static_cast<uint32_t>(warmup));
  } else if (warmup < -1) {
    return absl::InvalidArgumentError("--delayed_update_warmup: must be >= 0, or -1 for the config's");
  }
  if (const std::string w = absl::GetFlag(FLAGS_gradient_wire); !w.empty()) {
    config.mutable_wire()->set_gradients(w);
  }
  if (const std::string w = absl::GetFlag(FLAGS_weight_wire); !w.empty()) {
    config.mutable_wire()->set_weights(w);
  }
  std::string run_id = absl::GetFlag(FLAGS_run_id);
  if (run_id.empty()) run_id = GetEnv("TORCHELASTIC_RUN_ID");
  if (!run_id.empty()) config.mutable_cluster()->set_run_id(run_id);
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    config.mutable_cluster()->set_metrics_port(absl::GetFlag(FLAGS_metrics_port));
  }
  const bool metrics_off = absl::GetFlag(FLAGS_metrics_port) == 0;
  auto normalized = NormalizeConfig(config, topo.world());
  if (normalized.ok() && metrics_off) normalized->mutable_cluster()->set_metrics_port(0);
  if (normalized.ok() && normalized->cluster().servers_size() == 0) {
    return absl::InvalidArgumentError("cluster.servers: no state servers (--servers or the config)");
  }
  return normalized;
}

#ifdef ZEROSTATE_WITH_CUDA
// The CUDA backend of one rank: local rank 0 makes the node's NCCL id and
// shares it through a rendezvous on the state service.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaRank(client::Client* client, const v1::WorkerConfig& config,
                                                      const Topology& topo, const Layout& layout) {
  std::string id;
  if (topo.local_rank == 0) {
    auto made = cuda::NewNcclId();
    if (!made.ok()) return made.status();
    id = *made;
  }
  auto ids = client->Rendezvous(RendezvousScope(config), absl::StrCat("nccl/node", topo.node), topo.local_rank,
                                topo.local_size, id);
  if (!ids.ok()) return ids.status();
  cuda::CudaBackendOptions o;
  o.model = config.train().model();
  o.layout = layout;
  o.local_rank = topo.local_rank;
  o.local_size = topo.local_size;
  o.max_batch = config.train().micro_batch_size();
  o.nccl_id = (*ids)[0];
  o.grad_dtype = config.train().grad_dtype();
  o.weight_dtype = config.train().weight_dtype();
  return cuda::MakeCudaBackend(o);
}
#endif

// The backend factory for --backend; empty for the CPU backend.
absl::StatusOr<std::function<absl::StatusOr<std::unique_ptr<Backend>>(const Layout&)>> BackendFactory(
    client::Client* client, const v1::WorkerConfig& config, const Topology& topo) {
  const std::string name = absl::GetFlag(FLAGS_backend);
  if (name == "cpu") return nullptr;
#ifdef ZEROSTATE_WITH_CUDA
  if (name == "cuda") {
    return [client, config, topo](const Layout& layout) { return MakeCudaRank(client, config, topo, layout); };
  }
#endif
  return absl::InvalidArgumentError(absl::StrCat("--backend: '", name, "' is not built in (cpu",
#ifdef ZEROSTATE_WITH_CUDA
                                                 ", cuda",
#endif
                                                 ")"));
}

// What the ranks of this process share.
struct ProcessRun {
  v1::WorkerConfig config;
  Topology first;  // of local rank index 0 in this process
  client::ClientOptions client_options;
  RecoveryOptions recovery;
  absl::Duration peer_timeout = absl::InfiniteDuration();
  WorkerMetrics* metrics = nullptr;
  LocalGroup* thread_group = nullptr;  // --local_threads with the CPU backend
};

// One rank, with its own Client (see worker/engine.h for why).
absl::StatusOr<RankResult> RunRank(const ProcessRun& p, uint32_t index) {
  auto client = client::Client::Connect(p.client_options);
  if (!client.ok()) return client.status();
  RankRun run;
  run.config = p.config;
  run.topo = p.first;
  run.topo.local_rank += index;
  run.client = client->get();
  run.dump_path = absl::GetFlag(FLAGS_dump_weights);
  run.shared_staging = absl::GetFlag(FLAGS_shared_staging);
  run.recovery = p.recovery;
  run.peer_timeout = p.peer_timeout;
  const uint32_t rank = run.topo.rank();
  run.on_peer_gone = [rank](const std::string& message) {
    std::fprintf(stderr, "zerostate-worker rank %u: %s\n", rank, message.c_str());
    std::_Exit(1);  // the rank's own thread may be blocked on the dead peer for good
  };
  auto pause = TestPauseHook(absl::GetFlag(FLAGS_test_pause), rank);
  if (!pause.ok()) return pause.status();
  run.on_phase = *std::move(pause);
  run.group = p.thread_group;
  std::unique_ptr<LocalGroup> shm_group;
  if (run.group == nullptr && absl::GetFlag(FLAGS_backend) == "cpu") {
    auto g = OpenNodeGroup(run.client, p.config, run.topo, p.peer_timeout);
    if (!g.ok()) return g.status();
    shm_group = *std::move(g);
    run.group = shm_group.get();
  }
  auto factory = BackendFactory(run.client, p.config, run.topo);
  if (!factory.ok()) return factory.status();
  run.make_backend = *factory;
  const auto& train = p.config.train();
  const uint64_t samples = uint64_t{train.micro_batch_size()} * train.grad_accum_steps();
  const bool primary = index == 0, printer = run.topo.rank() == 0;
  run.observe = [&p, samples, primary, printer](const StepReport& r) {
    if (p.metrics != nullptr) p.metrics->Record(r, samples, primary);
    if (!printer) return;
    std::printf("%s\n", FormatProgress(r, p.config.train().global_batch_size()).c_str());
    std::fflush(stdout);
  };
  return TrainRank(run);
}

// Runs the process's ranks (threads, or just this one).
void RunRanks(const ProcessRun& p, uint32_t threads) {
  const uint32_t count = threads > 0 ? threads : 1;
  std::vector<absl::StatusOr<RankResult>> results(count, absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (uint32_t i = 0; i < count; ++i) {
    workers.emplace_back([&, i] {
      results[i] = RunRank(p, i);
      if (!results[i].ok()) {
        // Peers of a failed rank may wait at a barrier forever: fail the process now.
        std::fprintf(stderr, "zerostate-worker rank %u: %s\n", p.first.rank() + i,
                     results[i].status().ToString().c_str());
        std::_Exit(1);
      }
    });
  }
  for (auto& w : workers) w.join();
  const auto& losses = results[0]->losses;
  if (p.first.rank() == 0 && !losses.empty()) {
    std::printf("loss: first %.5f last %.5f over %zu steps\n", losses.front(), losses.back(), losses.size());
  }
}

int Main() {
  const uint32_t threads = absl::GetFlag(FLAGS_local_threads);
  auto topo = TopologyFromEnv(GetEnv, threads);
  if (!topo.ok()) return std::fprintf(stderr, "zerostate-worker: %s\n", topo.status().ToString().c_str()), 2;
  auto config = LoadConfig(*topo);
  if (!config.ok()) return std::fprintf(stderr, "zerostate-worker: %s\n", config.status().ToString().c_str()), 2;
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  if (const auto& c = config->cluster(); c.metrics_port() != 0) {
    std::string addr = absl::StrCat(c.metrics_host(), ":", c.metrics_port() + topo->local_rank);
    auto endpoint = StartMetricsEndpoint("metrics_port", addr, registry);
    if (!endpoint.ok()) {
      return std::fprintf(stderr, "zerostate-worker rank %u: %s (--metrics_port=0: no metrics)\n",
                          topo->rank(), endpoint.status().ToString().c_str()), 2;
    }
    exposer = std::move(endpoint->exposer);
    std::printf("zerostate-worker rank %u: metrics on http://%s/metrics\n", topo->rank(), addr.c_str());
  }
  WorkerMetrics metrics(*registry);
  client::ClientOptions options;
  options.servers.assign(config->cluster().servers().begin(), config->cluster().servers().end());
  options.rpc_timeout = std::chrono::milliseconds(config->cluster().rpc_timeout_ms());
  options.metrics = registry;
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.plaintext = absl::GetFlag(FLAGS_plaintext);
  options.data_plane = absl::GetFlag(FLAGS_data_plane);
  options.data_shm = absl::GetFlag(FLAGS_data_shm);
  if (const int32_t streams = absl::GetFlag(FLAGS_streams_per_server); streams != 0) {
    if (streams < 1 || streams > 64) {
      return std::fprintf(stderr,
                          "zerostate-worker: --streams_per_server: %d must be between 0 (the "
                          "client's default) and 64\n",
                          streams), 2;
    }
    options.streams_per_server = streams;
  }
  if (const int32_t streams = absl::GetFlag(FLAGS_same_host_streams_per_server); streams != -1) {
    if (streams < 0 || streams > 64) {
      return std::fprintf(stderr,
                          "zerostate-worker: --same_host_streams_per_server: %d must be between "
                          "-1 (the client's default) and 64\n",
                          streams), 2;
    }
    options.same_host_streams_per_server = streams;
  }
  auto token = WorkerJobToken(GetEnv(kJobTokenEnv), topo->world(), threads > 0 ? threads : 1);
  if (!token.ok()) return std::fprintf(stderr, "zerostate-worker: %s\n", token.status().ToString().c_str()), 2;
  options.job_token = *token;
  ProcessRun run{*config, *topo, options, {}};
  run.metrics = &metrics;
  run.recovery.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  run.recovery.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  run.recovery.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  if (auto s = ValidateRecoveryOptions(run.recovery); !s.ok()) {
    return std::fprintf(stderr, "zerostate-worker: %s\n", s.ToString().c_str()), 2;
  }
  const double peer_timeout = absl::GetFlag(FLAGS_peer_timeout_seconds);
  if (!(peer_timeout >= 0)) {
    return std::fprintf(stderr, "zerostate-worker: --peer_timeout_seconds: %g must be >= 0\n",
                        peer_timeout), 2;
  }
  if (peer_timeout > 0) run.peer_timeout = absl::Seconds(peer_timeout);
  const double server_wait = absl::GetFlag(FLAGS_server_wait_seconds);
  if (!(server_wait >= 0)) {
    return std::fprintf(stderr, "zerostate-worker: --server_wait_seconds: %g must be >= 0\n",
                        server_wait), 2;
  }
  run.recovery.server_wait = absl::Seconds(server_wait);
  if (auto pause = TestPauseHook(absl::GetFlag(FLAGS_test_pause), topo->rank()); !pause.ok()) {
    return std::fprintf(stderr, "zerostate-worker: %s\n", pause.status().ToString().c_str()), 2;
  }
  run.client_options.unavailable_wait = absl::ToChronoMilliseconds(absl::Seconds(server_wait));
  std::unique_ptr<LocalGroup> group;
  if (threads > 0 && absl::GetFlag(FLAGS_backend) == "cpu") {
    group = MakeThreadGroup(threads, FlatElems(*config), run.peer_timeout);
    run.thread_group = group.get();
  }
  RunRanks(run, threads);
  return 0;
}

}  // namespace
}  // namespace zerostate::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string timeline = absl::GetFlag(FLAGS_timeline);
  if (!timeline.empty()) (void)zerostate::Timeline::Start(timeline);  // not empty: cannot fail
  const int rc = zerostate::worker::Main();
  if (absl::Status s = zerostate::Timeline::Flush(); !s.ok()) {
    std::fprintf(stderr, "zerostate-worker: %s\n", std::string(s.message()).c_str());
    return rc == 0 ? 1 : rc;
  }
  return rc;
}
