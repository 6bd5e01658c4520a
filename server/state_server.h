// A whole state server: job registry, optimizer thread pool, rendezvous,
// metrics exposer and the gRPC server with health checking and reflection.
// main() builds one from flags; tests may build one in-process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/dataplane/data_tls_context.h"
#include "server/rpc/server_credentials.h"
#include "server/dataplane/data_plane.h"
#include "server/membership/membership.h"
#include "server/core/primaries.h"
#include "server/core/rendezvous.h"
#include "server/replication/replica_service.h"
#include "server/replication/replicator.h"
#include "server/replication/takeover.h"
#include "server/rpc/state_service.h"
#include "server/core/tier/tier_factory.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
class Registry;
}

namespace zerostate::server {

// The largest request metadata (all headers together) the gRPC port takes;
// a call with more is refused by gRPC before any handler runs.
inline constexpr int kMaxMetadataBytes = 16 << 10;

struct ServerOptions {
  std::string listen = "0.0.0.0:7070";           // gRPC; port 0 picks a free one
  std::string metrics_listen = "0.0.0.0:9464";   // Prometheus; "" disables
  // The registry the metrics go to (and `metrics_listen` serves), shared
  // with what main() builds beside the server (its membership); null: a
  // new one.
  std::shared_ptr<prometheus::Registry> metrics_registry;
  uint64_t ram_budget_bytes = 0;                 // 0: 80% of physical RAM
  // Gradient staging of early nodes' pieces (--staging_budget_bytes), on top
  // of the RAM budget; 0: an eighth of the RAM budget. At most the RAM budget.
  uint64_t staging_budget_bytes = 0;
  int threads = 0;                               // optimizer threads; 0: all cores
  // Threads stepping speculative jobs' blocks before their Step, a pool of
  // their own (fewer leave more cores to the pushes still arriving; on the
  // H200 host all of them were fastest, docs/performance.md); 0: `threads`.
  int speculation_threads = 0;
  // Their nice value, 0 to 19 (--speculation_nice): above 0 the pushes'
  // folds, on the data plane's threads, take a core ahead of them.
  int speculation_nice = 0;
  // Where TIER_NVME jobs keep their state (--nvme_dir, --nvme_cache_bytes,
  // --nvme_queue_depth); nvme_dir empty: such jobs are refused. Start fills
  // in the metrics sink.
  TierOptions tiers;
  ServiceOptions service;
  // Rendezvous quotas (--jobless_rendezvous_keys_per_token,
  // --jobless_rendezvous_keys); Start sets on_usage to the metrics.
  RendezvousOptions rendezvous;
  // Transport security of `listen`: TLS files, or plaintext; one of the
  // two is required (server/core/tls_files.h).
  TlsOptions tls;
  // --max_jobs, --job_ram_quota_bytes, --job_disk_quota_bytes.
  JobQuotas quotas;
  // The TCP data plane (server/dataplane/data_plane.h) for PushGradients and Gather:
  // "host:port" (port 0: any free port), "" for the host of `listen` on any
  // free port, "off" for none. Under TLS it speaks TLS 1.3 with the files
  // of `tls` (reloaded when they change; DataTlsContext).
  std::string data_listen;
  // Under TLS, hand the data plane's records to the kernel (kTLS) where it
  // offers it (--data_ktls); false: OpenSSL does them in userspace.
  bool data_ktls = true;
  // Serve clients on this host through shared memory (--data_shm;
  // common/shm_segment.h, server/dataplane/shm_session.h).
  bool data_shm = true;
  // RAM the data plane's frame buffers may hold, all connections together
  // (--data_buffer_bytes): pushes wait for room beyond it.
  uint64_t data_buffer_bytes = 64ull << 20;
  // How long one data plane frame may take to arrive, and a new connection
  // may wait before its first authorized frame (--data_frame_timeout_seconds;
  // server/dataplane/data_session.h).
  absl::Duration data_frame_timeout = absl::Seconds(60);
  // Data plane connections served at once (--max_data_connections, >= 1);
  // more are refused (server/dataplane/data_plane.h).
  int max_data_connections = 1024;
  // Replicated shards. Who serves which shard as primary: null
  // is a StaticMembership (no engine: no fencing); EtcdMembership where the
  // cluster runs etcd. Calls to peers trust `peer_tls_ca` (--peer_tls_ca;
  // empty: tls.client_ca_file) and present the server's certificate; one
  // step's call to a backup may take `replica_timeout`; a streamed step's
  // sums travel on `replica_lanes` connections to each backup's data plane
  // (0: one per 4 hardware threads, 1 to 4). A lost copy's catch-up holds
  // at most `catchup_backlog_bytes` of the steps decided while it runs
  // (Replicator::Options; >= 1).
  std::shared_ptr<Membership> membership;
  std::string peer_tls_ca;
  absl::Duration replica_timeout = absl::Seconds(60);
  int replica_lanes = 0;
  uint64_t catchup_backlog_bytes = uint64_t{4} << 30;
  // A backup's steps acknowledged and not yet applied
  // (HeldSteps::Options; --replica_held_steps,
  // --replica_lazy_apply).
  HeldSteps::Options replica_held;
  // Testing only (--test_seed_hold): ReplicaServiceImpl's SeedHook.
  ReplicaServiceImpl::SeedHook test_seed_hook;
};

class StateServer {
 public:
  // Starts listening. Errors: INVALID_ARGUMENT (options, e.g. neither TLS
  // files nor plaintext, or an unreadable certificate; names the flag),
  // UNAVAILABLE (an address could not be bound; names it).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<StateServer>> Start(
      const ServerOptions& options);
  ~StateServer();  // Shutdown(absl::ZeroDuration()) if still running

  // The bound addresses, with the real ports.
  const std::string& address() const { return address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  // The data plane's bound address, "" when it is off.
  const std::string& data_address() const { return data_address_; }
  // The data plane's transport, for the log at start: "plaintext", or TLS
  // with its suites and whether records go to the kernel; "" when off.
  const std::string& data_security() const { return data_security_; }
  // Whether clients on this host reach the data plane through shared memory.
  bool data_shm() const { return data_plane_ != nullptr && data_plane_->shm(); }
  uint64_t incarnation() const { return incarnation_; }

  // Stops: the health service answers NOT_SERVING (for "" and for
  // "zerostate.v1.StateService"), new calls are refused, and in-flight
  // calls, waiting ones included, get `grace` to finish; then waiting calls
  // fail with UNAVAILABLE and the rest are cancelled. Blocks until then.
  // Idempotent.
  void Shutdown(absl::Duration grace);
  // Blocks until the gRPC server has stopped.
  void Wait();

 private:
  StateServer() = default;
  // Starts data_plane_ (and data_tls_) unless --data_listen=off.
  [[nodiscard]] absl::Status StartDataPlane(const ServerOptions& opt,
                                            const DataSessionContext& ctx);
  // Sets the health service's status of "" and of the service's name.
  void SetServing(bool serving);

  uint64_t incarnation_ = 0;
  std::string address_;
  std::string metrics_address_;
  std::string data_address_;
  std::string data_security_;
  // Destroyed in reverse: jobs_ (whose accumulators give staging back to
  // staging_, which updates metrics_) before staging_ before metrics_.
  std::unique_ptr<ServerMetrics> metrics_;
  std::shared_ptr<StagingBudget> staging_;
  // The sums kept as a backup (REPLICA_SUM frames); outlives the services,
  // the data plane and replicator_, which use it.
  std::unique_ptr<KeptSums> kept_sums_;
  std::unique_ptr<AcceptedTerms> accepted_terms_;  // the backups' (ReplicaServiceImpl)
  // Outlives jobs_: each replicated job's JobStep keeps a ShardReplicator
  // that calls it.
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<JobRegistry> jobs_;
  std::unique_ptr<RendezvousTable> rendezvous_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ThreadPool> speculation_pool_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<Membership> membership_;
  std::unique_ptr<Primaries> primaries_;
  std::unique_ptr<PushHandler> pushes_;  // over jobs_ and primaries_
  std::unique_ptr<GatherHandler> gathers_;
  std::unique_ptr<StateServiceImpl> service_;
  std::unique_ptr<ReplicaServiceImpl> replica_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<DataBufferPool> data_buffers_;
  std::unique_ptr<SharedMappings> shared_mappings_;  // the same-host clients' shared buffers
  std::unique_ptr<DataTlsContext> data_tls_;  // null in plaintext
  std::unique_ptr<DataPlane> data_plane_;  // destroyed before jobs_, data_buffers_, shared_mappings_
  // Claims the shards this server backs up when their primary is lost;
  // destroyed first (it uses membership_, jobs_ and primaries_).
  std::unique_ptr<Takeover> takeover_;
  bool shut_down_ = false;
};

}  // namespace zerostate::server
