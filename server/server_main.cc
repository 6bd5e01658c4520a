// zerostate-server: one state server process. See README.md and
// docs/operations.md. Stops cleanly on SIGTERM or SIGINT.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/timeline.h"
#include "server/core/io/fault_env.h"
#include "server/core/io/uring_env.h"
#include "server/membership/membership_setup.h"
#include "server/state_server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070", "gRPC address host:port (port 0: any free port)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "Prometheus metrics address host:port (empty: no metrics endpoint)");
ABSL_FLAG(uint64_t, ram_budget_bytes, 0, "RAM the server's jobs may hold (0: 80% of physical RAM)");
ABSL_FLAG(uint64_t, staging_budget_bytes, 0,
          "RAM for gradients of nodes that push before their turn, all jobs together, on top "
          "of --ram_budget_bytes and at most as large (0: an eighth of the RAM budget); "
          "a push that finds it spent waits, then is refused with UNAVAILABLE");
ABSL_FLAG(int, threads, 0, "optimizer threads (0: one per core)");
ABSL_FLAG(int, speculation_threads, 0,
          "threads stepping speculative jobs' blocks as their gradients complete, before the "
          "Step, a pool of their own (0: as many as --threads); fewer leave more cores to the "
          "pushes still arriving");
ABSL_FLAG(int, speculation_nice, 0,
          "nice value of the speculation pool's threads, 0 to 19: above 0 the pushes' folds take "
          "a core ahead of the speculations");
ABSL_FLAG(std::string, nvme_dir, "",
          "directory on a local NVMe drive for jobs registered with tier TIER_NVME "
          "(empty: such jobs are refused)");
ABSL_FLAG(uint64_t, nvme_cache_bytes, 256ull << 20, "RAM cache of each NVMe-tier job's shard");
ABSL_FLAG(int, nvme_queue_depth, 8, "blocks in flight in an NVMe-tier job's step pipeline (>= 2)");
ABSL_FLAG(int, max_wait_seconds, 600, "longest wait of a call that set no deadline");
ABSL_FLAG(int, grace_seconds, 10, "time in-flight calls get to finish on SIGTERM");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the gRPC port (TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA that signs client certificates: given, clients must present one (mutual TLS)");
ABSL_FLAG(bool, plaintext, false,
          "serve gRPC without TLS (required when no --tls_cert/--tls_key is given)");
ABSL_FLAG(std::string, data_listen, "",
          "TCP data plane address host:port for push and gather (port 0: any free port; "
          "empty: the host of --listen, any free port; off: none). Under TLS it speaks TLS 1.3 "
          "with --tls_cert/--tls_key/--tls_client_ca");
ABSL_FLAG(bool, data_shm, true,
          "serve clients on this host through shared memory (a memfd segment per connection, "
          "over an abstract unix socket named after the data port) instead of loopback TCP");
ABSL_FLAG(uint64_t, data_buffer_bytes, 64ull << 20,
          "RAM the data plane's frame buffers hold at most, all connections together");
// Why 1024: each data plane connection costs two threads (about 16 MiB of
// address space, little of it touched), so the cap keeps a server at a few
// thousand threads, well under the usual limits; a client process holds up
// to 2 * streams_per_server connections per server (8 by default), so 1024
// serves 128 trainer processes at full speed, and connections beyond it
// fall back to gRPC rather than fail.
ABSL_FLAG(int, max_data_connections, 1024,
          "TCP data plane connections served at once (>= 1; each costs two threads); one more "
          "is refused with RESOURCE_EXHAUSTED and its client uses gRPC instead");
ABSL_FLAG(std::string, peer_tls_ca, "",
          "PEM CA that signed the other servers' certificates, trusted when this server sends "
          "a replicated job's steps to backups (empty: --tls_client_ca)");
ABSL_FLAG(double, replica_timeout_seconds, 60,
          "how long one step's call to a backup may take before the backup counts as lost");
ABSL_FLAG(int, replica_lanes, 0,
          "connections each streamed step's gradient sums travel on to each backup "
          "(0: one per 4 hardware threads, 1 to 4)");
ABSL_FLAG(uint64_t, replica_held_steps, 2,
          "steps a backup acknowledges to its primary before it applied them (>= 1): it holds "
          "them and applies them behind the primary; one more applies the oldest first");
ABSL_FLAG(bool, replica_lazy_apply, false,
          "a backup applies the steps it holds only when --replica_held_steps is reached, when its "
          "copy is read or when it answers as primary, not as they come (replication_bench: the "
          "step's path without the backups' passes)");
ABSL_FLAG(uint64_t, catchup_backlog_bytes, uint64_t{4} << 30,
          "bytes of the steps decided while a lost copy is caught up in the background that "
          "its catch-up holds for it (>= 1; at least one step's summed gradients of a shard): "
          "one more drops the catch-up, and a later step starts another");
// The gRPC edge's chunk streams each hold at most one waiting thread
// (a gather, or a push waiting for staging memory), so the cap bounds those
// threads as --max_data_connections bounds the data plane's.
ABSL_FLAG(int, max_grpc_streams, 1024,
          "gRPC chunk streams (InitWeights, PushGradients, Gather) served at once (>= 1); one "
          "more is refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(double, data_frame_timeout_seconds, 60,
          "how long one data plane frame (at most 64 MiB) may take to arrive, and a new data "
          "connection may wait before its first authorized frame; a slower one is closed");
ABSL_FLAG(bool, data_ktls, true,
          "under TLS, hand the data plane's TLS records to the kernel (kTLS) where it offers "
          "it; false: OpenSSL encrypts in userspace");
ABSL_FLAG(uint64_t, jobless_rendezvous_keys_per_token, 1024,
          "rendezvous keys one token that holds no job here may have (>= 1; workers meet "
          "before rank 0 registers the job)");
ABSL_FLAG(uint64_t, jobless_rendezvous_keys, 8192,
          "rendezvous keys all tokens that hold no job here may have together (>= "
          "--jobless_rendezvous_keys_per_token)");
ABSL_FLAG(uint64_t, max_jobs, 0, "jobs this server holds at most (0: unlimited)");
ABSL_FLAG(uint64_t, job_ram_quota_bytes, 0, "RAM one job's shard may hold (0: unlimited)");
ABSL_FLAG(uint64_t, job_disk_quota_bytes, 0,
          "disk one job's shard may use under --nvme_dir (0: unlimited)");
ABSL_FLAG(std::string, etcd_endpoints, "",
          "etcd client endpoints, comma-separated host:port or http://host:port: this server "
          "joins the cluster's membership there (a lease, a member key, primaries of replicated "
          "shards and their fencing); empty: no membership (jobs without backups need none)");
ABSL_FLAG(std::string, cluster, "default",
          "name of this server's cluster in etcd (keys under /zerostate/<cluster>/)");
ABSL_FLAG(int64_t, etcd_lease_ttl_seconds, 10,
          "seconds etcd keeps this server's lease after its last keepalive (>= 2): a crashed "
          "primary's shards are free this long after it died; it stops acting as primary a "
          "quarter of this before");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port other servers and clients dial to reach this server's gRPC port, as "
          "named in etcd (empty: --listen, a wildcard host replaced by this host's name)");
ABSL_FLAG(std::string, replace, "",
          "HOST:PORT name of a dead or hung server this process replaces from another address "
          "(needs --etcd_endpoints): once the old process's lease has lapsed in etcd it joins "
          "under that name and publishes its own address (--advertise_address) there, where "
          "the other servers and the clients look the name up; refused while the old process "
          "keeps its lease alive, and the old process, should it come back, fences itself");
ABSL_FLAG(int64_t, replace_wait_seconds, -1,
          "seconds a server whose name another process holds in etcd (--replace) waits for "
          "that process's lease to lapse before it refuses to start; -1: twice "
          "--etcd_lease_ttl_seconds");

namespace {

// Set when the membership found this server's name taken by another
// process: main() then exits with kFencedExit.
std::atomic<bool> fenced_for_good{false};
constexpr int kFencedExit = 3;

// The server's membership in etcd (server/membership/membership_setup.h);
// null without --etcd_endpoints. Exits on an error.
std::shared_ptr<zerostate::server::EtcdMembership> JoinMembership(
    const std::string& listen, std::shared_ptr<prometheus::Registry> registry) {
  zerostate::server::MembershipConfig config;
  config.etcd_endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  config.cluster = absl::GetFlag(FLAGS_cluster);
  config.lease_ttl_seconds = absl::GetFlag(FLAGS_etcd_lease_ttl_seconds);
  config.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  config.replace = absl::GetFlag(FLAGS_replace);
  config.replace_wait_seconds = absl::GetFlag(FLAGS_replace_wait_seconds);
  config.on_fenced = [](const std::string& why) {
    std::cerr << "zerostate-server: " << why << "; stopping" << std::endl;
    fenced_for_good = true;
    kill(getpid(), SIGTERM);  // the signal thread shuts down, as on SIGTERM
  };  auto membership = zerostate::server::StartMembership(config, listen, std::move(registry));
  if (!membership.ok()) {
    std::cerr << "zerostate-server: " << membership.status() << std::endl;
    std::exit(1);
  }
  return *std::move(membership);
}

}  // namespace

ABSL_FLAG(std::string, timeline, "",
          "write a timeline of this server's step events (folds, speculations, Steps, gather "
          "pieces; CLOCK_MONOTONIC ns, JSON lines) to this file at shutdown "
          "(bench/step/timeline.py reads it)");
ABSL_FLAG(std::string, test_seed_hold, "",
          "testing: PHASE:DIR; a replicated shard's catch-up (ReplicaService.Seed) received "
          "here stops at PHASE (blocks: after its first block; applied: after the copy took "
          "the state) until DIR/release exists, and says so with DIR/PHASE-shard<N>");
ABSL_FLAG(std::string, test_nvme_write_hold, "",
          "testing: FIFO (a named pipe); the NVMe tier's first write waits until it reads a "
          "byte from FIFO, so a test holds an NVMe job's creation where it likes");

namespace {

// --test_nvme_write_hold: opening FIFO for reading blocks until the test
// opens it for writing (which tells the test that the write is held), and
// the read until the test writes the byte that lets it go.
std::shared_ptr<zerostate::server::io::Env> HoldingEnv(const std::string& fifo) {
  namespace io = zerostate::server::io;
  auto env = std::make_shared<io::FaultEnv>(io::NewUringEnv());
  io::FaultRule rule;
  rule.kind = io::FaultKind::kDelay;
  rule.op = io::IoOp::kWrite;
  rule.delay = [fifo] {
    int fd = open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
    char byte = 0;
    if (fd >= 0 && read(fd, &byte, 1) < 0) perror("test_nvme_write_hold");
    if (fd >= 0) close(fd);
  };
  env->AddRule(std::move(rule));
  return env;
}

// --test_seed_hold=PHASE:DIR: a Seed received at PHASE ("blocks" or
// "applied", ReplicaServiceImpl::SeedHook) creates DIR/PHASE-shard<N>,
// then waits until DIR/release exists. Exits on a malformed value.
zerostate::server::ReplicaServiceImpl::SeedHook SeedHold(const std::string& flag) {
  const size_t colon = flag.find(':');
  const std::string phase = flag.substr(0, colon);
  if (colon == std::string::npos || (phase != "blocks" && phase != "applied")) {
    std::cerr << "zerostate-server: --test_seed_hold: '" << flag
              << "' is not PHASE:DIR with PHASE blocks or applied" << std::endl;
    std::exit(1);
  }
  const std::string dir = flag.substr(colon + 1);
  return [phase, dir](std::string_view at, uint32_t shard) {
    if (at != phase) return;
    const std::string marker = dir + "/" + phase + "-shard" + std::to_string(shard);
    if (int fd = open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644); fd >= 0) close(fd);
    const std::string release = dir + "/release";
    while (access(release.c_str(), F_OK) != 0) usleep(10000);
  };
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("zerostate state server: holds sharded training state");
  absl::ParseCommandLine(argc, argv);
  // A fixed mmap threshold: every buffer of 128 KiB or more (block staging,
  // frame buffers, gather copies) is mapped on allocation and unmapped on
  // free. glibc's default threshold rises to the largest block freed, after
  // which such buffers come from per-thread heaps that keep freed memory:
  // with the data plane's thread per connection, 64 trainer processes held
  // each server at 2-2.8x its RAM budget after 20 steps (bench/load,
  // VmHWM 716 MiB; 152 MiB with the threshold fixed).
  mallopt(M_MMAP_THRESHOLD, 128 << 10);

  // Every thread inherits this mask; one thread waits for the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A write to a connection the peer reset fails with EPIPE instead of
  // killing the server: OpenSSL's socket BIO (the TLS data plane) writes
  // without MSG_NOSIGNAL (client_network_fault_test cut_mid_push_tcp_tls
  // lost a server this way about every other run).
  signal(SIGPIPE, SIG_IGN);
  if (const std::string timeline = absl::GetFlag(FLAGS_timeline); !timeline.empty()) {
    (void)zerostate::Timeline::Start(timeline);  // not empty: cannot fail
  }

  zerostate::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_registry = std::make_shared<prometheus::Registry>();
  auto membership = JoinMembership(options.listen, options.metrics_registry);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.ram_budget_bytes = absl::GetFlag(FLAGS_ram_budget_bytes);
  options.staging_budget_bytes = absl::GetFlag(FLAGS_staging_budget_bytes);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.speculation_threads = absl::GetFlag(FLAGS_speculation_threads);
  options.speculation_nice = absl::GetFlag(FLAGS_speculation_nice);
  options.tiers.nvme_dir = absl::GetFlag(FLAGS_nvme_dir);
  options.tiers.nvme_cache_bytes = absl::GetFlag(FLAGS_nvme_cache_bytes);
  options.tiers.nvme_queue_depth = absl::GetFlag(FLAGS_nvme_queue_depth);
  if (const std::string hold = absl::GetFlag(FLAGS_test_nvme_write_hold); !hold.empty()) {
    options.tiers.env = HoldingEnv(hold);
  }
  options.service.max_wait = absl::Seconds(absl::GetFlag(FLAGS_max_wait_seconds));
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.tls.plaintext = absl::GetFlag(FLAGS_plaintext);
  options.rendezvous.guest.keys = absl::GetFlag(FLAGS_jobless_rendezvous_keys_per_token);
  options.rendezvous.guests.keys = absl::GetFlag(FLAGS_jobless_rendezvous_keys);
  options.quotas.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.quotas.job_ram_bytes = absl::GetFlag(FLAGS_job_ram_quota_bytes);
  options.quotas.job_disk_bytes = absl::GetFlag(FLAGS_job_disk_quota_bytes);
  options.data_listen = absl::GetFlag(FLAGS_data_listen);
  options.data_buffer_bytes = absl::GetFlag(FLAGS_data_buffer_bytes);
  options.data_shm = absl::GetFlag(FLAGS_data_shm);
  options.max_data_connections = absl::GetFlag(FLAGS_max_data_connections);
  options.service.max_streams = absl::GetFlag(FLAGS_max_grpc_streams);
  options.data_ktls = absl::GetFlag(FLAGS_data_ktls);
  options.data_frame_timeout = absl::Seconds(absl::GetFlag(FLAGS_data_frame_timeout_seconds));
  options.peer_tls_ca = absl::GetFlag(FLAGS_peer_tls_ca);
  options.replica_timeout = absl::Seconds(absl::GetFlag(FLAGS_replica_timeout_seconds));
  options.replica_lanes = absl::GetFlag(FLAGS_replica_lanes);
  options.catchup_backlog_bytes = absl::GetFlag(FLAGS_catchup_backlog_bytes);
  options.replica_held.max_held = absl::GetFlag(FLAGS_replica_held_steps);
  options.replica_held.lazy_apply = absl::GetFlag(FLAGS_replica_lazy_apply);
  if (const std::string hold = absl::GetFlag(FLAGS_test_seed_hold); !hold.empty()) {
    options.test_seed_hook = SeedHold(hold);
  }
  options.membership = membership;  // null: StaticMembership (no etcd, no fencing)
  auto server = zerostate::server::StateServer::Start(options);
  if (!server.ok()) {
    std::cerr << "zerostate-server: " << server.status() << std::endl;
    return 1;
  }
  if (options.tls.plaintext) {
    std::cerr << "zerostate-server: warning: --plaintext: gRPC traffic, job tokens included, "
                 "travels unencrypted; use --tls_cert/--tls_key outside a trusted network"
              << std::endl;
  }
  if (!(*server)->data_address().empty()) {
    std::cout << "zerostate-server data plane on " << (*server)->data_address() << " ("
              << (*server)->data_security() << ")"
              << ((*server)->data_shm() ? ", same-host clients through shared memory" : "")
              << std::endl;
  } else {
    std::cerr << "zerostate-server: data plane off (--data_listen=off); push and gather use gRPC"
              << std::endl;
  }
  if (membership) {
    // This process holds the address now: its previous process is gone.
    if (auto st = membership->ReplacePreviousIncarnation(); !st.ok()) {
      std::cerr << "zerostate-server: membership: " << st << std::endl;
    }
    std::cout << "zerostate-server member of cluster " << absl::GetFlag(FLAGS_cluster)
              << " in etcd as " << membership->self() << " (lease " << membership->lease_id()
              << ", TTL " << absl::GetFlag(FLAGS_etcd_lease_ttl_seconds) << " s)" << std::endl;
  }
  std::cout << "zerostate-server listening on " << (*server)->address() << " metrics on "
            << ((*server)->metrics_address().empty() ? "(off)" : (*server)->metrics_address())
            << std::endl;

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::cout << "zerostate-server: signal " << sig << ", shutting down" << std::endl;
    (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_grace_seconds)));
  });
  (*server)->Wait();
  waiter.join();
  // After the calls in flight finished: fenced, then the lease revoked, so
  // backups take this server's primaries at once.
  if (membership) membership->Leave();
  if (absl::Status s = zerostate::Timeline::Flush(); !s.ok()) {
    std::cerr << "zerostate-server: " << s.message() << std::endl;
  }
  std::cout << "zerostate-server: stopped" << std::endl;
  return fenced_for_good ? kFencedExit : 0;
}
