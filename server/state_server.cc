#include "server/state_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/data_tls.h"
#include "common/metrics_exposer.h"
#include "server/replication/static_membership.h"

namespace zerostate::server {
namespace {

constexpr int kMaxMessageBytes = 256 << 20;

// HTTP/2 and socket settings for streams of ~1 MiB chunks, as the client
// sets them (client/server_conn.cc); docs/performance.md ("transport")
// says what they did, and what larger HTTP/2 frames did not.
void SetTransportArguments(grpc::ServerBuilder& builder) {
  // Receive windows that hold several chunks from the start, rather than
  // 64 KiB until the BDP probe has grown them.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 4 << 20);
  // Socket reads of 1-4 MiB: a pushed chunk arrives in a few slices.
  builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20);
  // Clients ping every second or more (ClientOptions::keepalive_time) to
  // find a hung or cut-off server, also with no call open and during a
  // silent call: allowed, with slack (gRPC's default: a ping every 5
  // minutes without data, or the connection is closed with "too many pings").
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

// What a client without a valid token can make the server hold or do
// before any check. gRPC binds with SO_REUSEPORT by default: a second
// server on a port in use would start, and the kernel would split new
// connections between the two. Metadata (headers) is capped at
// kMaxMetadataBytes, set here rather than left to gRPC's default (8 KiB in
// 1.51) so that it does not move with the gRPC version; a token is at most
// 256 characters. The cap makes the refusal certain, not cheap: gRPC 1.51
// parses a huge value before it refuses it (docs/reliability.md, "Huge
// request metadata").
void SetUntrustedNetworkArguments(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
}

uint64_t DefaultRamBudget() {
  uint64_t pages = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES));
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return pages * page / 10 * 8;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

std::string HostOf(const std::string& addr) { return addr.substr(0, addr.rfind(':')); }

absl::Status CheckNvmeDir(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || access(dir.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvme_dir: '", dir, "' is not a writable directory"));
  }
  return absl::OkStatus();
}

// The staging budget: an eighth of the RAM budget unless set. Why an
// eighth: a RAM-tier job's estimate is 4 bytes per parameter of gradient
// sum, 0-2 of low-precision copy and 8-12 of state (AdamW, bf16 weights:
// 18), so an eighth stages about 2.25 bytes per parameter of such shards -
// over half of one whole node running a step ahead - while the server's
// peak stays within 9/8 of its RAM budget. Over the RAM budget it would
// bound nothing useful (the point is a server that stays near its
// budget): refused.
absl::StatusOr<uint64_t> StagingBudgetBytes(uint64_t requested, uint64_t ram_budget) {
  if (requested == 0) return std::max<uint64_t>(ram_budget / 8, 1);
  if (requested > ram_budget) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging_budget_bytes: ", requested, " is more than the RAM budget of ", ram_budget,
        " bytes (--ram_budget_bytes); staging comes on top of that budget, and may be at most "
        "as large (0: an eighth of it)"));
  }
  return requested;
}

// What the data plane's connections will be, for the log at start.
std::string DescribeDataSecurity(const ServerOptions& opt) {
  if (opt.tls.plaintext) return "plaintext";
  std::string records =
      !opt.data_ktls          ? "records in OpenSSL (userspace; --data_ktls=false)"
      : KernelTlsAvailable() ? "records in the kernel (kTLS) where OpenSSL can hand them over"
                             : "records in OpenSSL (userspace: this kernel offers no TLS; "
                               "load its tls module for kTLS)";
  return absl::StrCat("TLS 1.3 (TLS_AES_128_GCM_SHA256 or TLS_AES_256_GCM_SHA384), ",
                      opt.tls.client_ca_file.empty() ? "" : "client certificates required, ",
                      records);
}

}  // namespace

// Starts the data plane unless it is off; "" means the host of `listen`
// with any free port.
absl::Status StateServer::StartDataPlane(const ServerOptions& opt, const DataSessionContext& ctx) {
  if (opt.data_listen == "off") return absl::OkStatus();
  if (!opt.tls.plaintext) {
    auto tls = DataTlsContext::Load(opt.tls, opt.data_ktls);
    if (!tls.ok()) return tls.status();
    data_tls_ = *std::move(tls);
  }
  std::string listen =
      opt.data_listen.empty() ? absl::StrCat(HostOf(opt.listen), ":0") : opt.data_listen;
  auto started =
      DataPlane::Start(listen, ctx, opt.max_data_connections, data_tls_.get(), opt.data_shm);
  if (!started.ok()) return started.status();
  data_plane_ = *std::move(started);
  data_address_ = absl::StrCat(HostOf(listen), ":", data_plane_->port());
  data_security_ = DescribeDataSecurity(opt);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StateServer>> StateServer::Start(const ServerOptions& opt) {
  if (opt.listen.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("listen: '", opt.listen, "' is not host:port"));
  }
  if (auto st = CheckNvmeDir(opt.tiers.nvme_dir); !st.ok()) return st;
  // Checked even when the data plane is off: a bad flag is refused alike.
  if (auto st = DataPlane::CheckMaxConnections(opt.max_data_connections); !st.ok()) return st;
  if (auto st = StreamCap::Check(opt.service.max_streams); !st.ok()) return st;
  if (auto st = RendezvousTable::Check(opt.rendezvous); !st.ok()) return st;
  if (opt.data_frame_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_frame_timeout_seconds: ", absl::FormatDuration(opt.data_frame_timeout),
                     " must be more than 0"));
  }
  auto credentials = ServerCredentialsFor(opt.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<StateServer> s(new StateServer());
  s->incarnation_ = NewIncarnation();
  uint64_t budget = opt.ram_budget_bytes ? opt.ram_budget_bytes : DefaultRamBudget();
  auto staging_bytes = StagingBudgetBytes(opt.staging_budget_bytes, budget);
  if (!staging_bytes.ok()) return staging_bytes.status();
  int threads = opt.threads > 0 ? opt.threads
                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s->metrics_ = std::make_unique<ServerMetrics>(
      opt.metrics_registry ? opt.metrics_registry : std::make_shared<prometheus::Registry>());
  TierOptions tiers = opt.tiers;
  tiers.metrics = [m = s->metrics_.get()](const std::string& job) { return m->TierSink(job); };
  s->staging_ = std::make_shared<StagingBudget>(*staging_bytes, s->metrics_.get());
  s->jobs_ = std::make_unique<JobRegistry>(budget, std::move(tiers), opt.quotas, s->staging_);
  RendezvousOptions rendezvous = opt.rendezvous;
  rendezvous.on_usage = [m = s->metrics_.get()](const RendezvousUsage& u) {
    m->SetRendezvous(u.keys, u.bytes, u.jobless_keys, u.jobless_bytes);
  };
  s->rendezvous_ = std::make_unique<RendezvousTable>(std::move(rendezvous));
  s->pool_ = std::make_unique<ThreadPool>(threads, 0, "zs-pass");
  s->speculation_pool_ = std::make_unique<ThreadPool>(
      opt.speculation_threads > 0 ? opt.speculation_threads : threads, opt.speculation_nice,
      "zs-speculate");
  s->metrics_->SetRam(0, budget, 0);
  if (!opt.metrics_listen.empty()) {
    auto endpoint =
        StartMetricsEndpoint("metrics_listen", opt.metrics_listen, s->metrics_->registry());
    if (!endpoint.ok()) return endpoint.status();
    s->exposer_ = std::move(endpoint->exposer);
    s->metrics_address_ = endpoint->address;
  }
  ServiceOptions service = opt.service;
  service.nvme_dir = opt.tiers.nvme_dir;
  s->data_buffers_ = std::make_unique<DataBufferPool>(opt.data_buffer_bytes);
  s->shared_mappings_ = std::make_unique<SharedMappings>();
  // Replicated shards: who serves which shard as primary, and
  // the steps' way to the backups.
  auto peer_credentials = PeerCredentialsFor(opt.tls, opt.peer_tls_ca);
  if (!peer_credentials.ok()) return peer_credentials.status();
  if (opt.replica_lanes < 0 || opt.replica_lanes > 16) {
    return absl::InvalidArgumentError(absl::StrCat("--replica_lanes: ", opt.replica_lanes,
                                                   " is not between 0 (automatic) and 16"));
  }
  if (opt.speculation_nice < 0 || opt.speculation_nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculation_nice: ", opt.speculation_nice,
        " is not between 0 and 19 (a priority below the server's other threads'; raising it "
        "needs privileges)"));
  }
  if (opt.catchup_backlog_bytes == 0) {
    return absl::InvalidArgumentError(
        "--catchup_backlog_bytes: 0 holds no step; a catch-up needs at least one step's "
        "request and summed gradients of a shard");
  }
  if (opt.replica_held.max_held < 1) {
    return absl::InvalidArgumentError(
        "--replica_held_steps: 0 holds no step; a backup holds at least the one it acknowledges");
  }
  s->membership_ = opt.membership != nullptr
                       ? opt.membership
                       : std::make_shared<StaticMembership>(opt.listen, std::vector<std::string>{});
  s->primaries_ = std::make_unique<Primaries>(*s->membership_);
  // A backup claims its lost primary's shard on its own (a hung primary is
  // replaced a lease after its last keepalive, as a dead one).
  s->takeover_ =
      std::make_unique<Takeover>(*s->membership_, *s->jobs_, *s->primaries_, Takeover::Options{});
  const int lanes =
      opt.replica_lanes > 0
          ? opt.replica_lanes
          : std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  auto peer_data_tls = PeerDataTlsFor(opt.tls, opt.peer_tls_ca, opt.data_ktls);
  if (!peer_data_tls.ok()) return peer_data_tls.status();
  // The sums a backup receives; applied ones recycled, up to the held
  // steps' sums of each shard it backs (and the one it receives), in the
  // RAM budget's room the jobs leave, given back when a job needs it.
  s->kept_sums_ = std::make_unique<KeptSums>(
      s->metrics_.get(), uint64_t{opt.replica_held.max_held} + 1, s->jobs_.get());
  s->jobs_->SetBorrower(s->kept_sums_.get());
  s->accepted_terms_ = std::make_unique<AcceptedTerms>();
  s->replicator_ = std::make_unique<Replicator>(Replicator::Options{
      *std::move(peer_credentials), opt.replica_timeout, absl::Seconds(1), s->metrics_.get(),
      lanes, s->primaries_.get(), *std::move(peer_data_tls), s->kept_sums_.get(),
      s->accepted_terms_.get(), opt.catchup_backlog_bytes, s->membership_.get()});
  // The core's push and gather paths, which both edges call.
  s->pushes_ = std::make_unique<PushHandler>(*s->jobs_, s->primaries_.get(), service.max_wait,
                                             s->metrics_.get());
  s->gathers_ = std::make_unique<GatherHandler>(*s->jobs_, s->primaries_.get(), service.max_wait,
                                                service.gather_piece_elems, s->metrics_.get());
  s->replica_service_ = std::make_unique<ReplicaServiceImpl>(
      *s->jobs_, *s->pool_, s->primaries_.get(), *s->kept_sums_, *s->accepted_terms_,
      opt.test_seed_hook, opt.replica_held);
  DataSessionContext data;
  data.replica_sums = s->replica_service_.get();
  data.pushes = s->pushes_.get();
  data.gathers = s->gathers_.get();
  data.metrics = s->metrics_.get();
  data.incarnation = s->incarnation_;
  data.buffers = s->data_buffers_.get();
  data.shared_mappings = s->shared_mappings_.get();
  data.frame_timeout = opt.data_frame_timeout;
  if (auto st = s->StartDataPlane(opt, data); !st.ok()) return st;
  service.data_port = s->data_plane_ ? s->data_plane_->port() : 0;
  s->service_ = std::make_unique<StateServiceImpl>(
      service, *s->jobs_, *s->pushes_, *s->gathers_, *s->rendezvous_, *s->pool_,
      *s->speculation_pool_, *s->metrics_, s->incarnation_, s->primaries_.get(),
      s->replicator_.get());
  s->replica_service_->SetDataPort(service.data_port);
  s->service_->PublishUsage();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(opt.listen, *credentials, &port);
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->replica_service_.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  SetTransportArguments(builder);
  SetUntrustedNetworkArguments(builder);
  s->grpc_server_ = builder.BuildAndStart();
  if (!s->grpc_server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "listen: cannot listen on ", opt.listen, " (in use by another process, or no such address)"));
  }
  s->address_ = absl::StrCat(HostOf(opt.listen), ":", port);
  s->SetServing(true);
  return s;
}

void StateServer::SetServing(bool serving) {
  auto* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);  // "" and every name set before
  health->SetServingStatus(v1::StateService::service_full_name(), serving);
}

void StateServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  SetServing(false);
  // Calls waiting on a step, a gather or a rendezvous keep waiting through
  // the grace period like every other call; at its end (or once every call
  // has finished) they are woken with UNAVAILABLE, so that gRPC's cancel
  // does not wait for handlers blocked until their own deadlines.
  absl::Time deadline = absl::Now() + grace;
  absl::Notification calls_done;
  std::thread cut([&] {
    calls_done.WaitForNotificationWithDeadline(deadline);
    jobs_->Shutdown();
    rendezvous_->Shutdown();
    if (data_plane_) data_plane_->Shutdown();
  });
  grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  calls_done.Notify();
  cut.join();
}

void StateServer::Wait() { grpc_server_->Wait(); }

StateServer::~StateServer() {
  if (grpc_server_) {
    Shutdown(absl::ZeroDuration());
    grpc_server_->Wait();
  }
}

}  // namespace zerostate::server
