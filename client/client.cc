// Client: connection setup, job registration and attachment, rendezvous.
#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/channel_credentials.h"
#include "client/client_impl.h"
#include "client/data_streams.h"
#include "client/job_client_impl.h"
#include "client/ticket_state.h"
#include "common/data_tls.h"
#include "common/job_spec.h"
#include "client/validate.h"

namespace zerostate::client {
namespace {

// How often the ChannelWatch reads the channels' states: a small part of
// the shortest keepalive timeout (1 s).
constexpr absl::Duration kChannelWatchPeriod = absl::Milliseconds(100);

// `o` with streams_per_server raised where the data plane's TLS records
// will be done in userspace, or every server shares this host
// (data_streams.h).
ClientOptions RaiseStreams(ClientOptions o) {
  const bool userspace_tls =
      o.data_plane && !o.plaintext && (!o.data_ktls || !KernelTlsAvailable());
  o.streams_per_server =
      DataStreamsPerServer(o, userspace_tls, AllServersOnThisHost(o), UsableCores());
  return o;
}

int PoolThreads(const ClientOptions& o) {
  if (o.threads > 0) return o.threads;
  return std::max<int>(4, 2 * static_cast<int>(o.servers.size()) * o.streams_per_server);
}

// Two fan-outs at once on every server but the caller's.
int ControlThreads(const ClientOptions& o) {
  return std::max<int>(1, 2 * (static_cast<int>(o.servers.size()) - 1));
}

// One ForEachServer call's shards: taken one at a time by the calling
// thread and the control pool's, each run once.
struct FanOut {
  explicit FanOut(int n) : n(n), results(n) {}

  // Runs the shards nobody took yet; `fn` is dereferenced only for a shard
  // taken here, which the caller waits for, so it is still alive.
  void Run(absl::FunctionRef<absl::Status(int)>* fn) {
    for (int s = next.fetch_add(1); s < n; s = next.fetch_add(1)) {
      absl::Status result = (*fn)(s);
      absl::MutexLock lock(&mu);
      results[s] = std::move(result);
      ++done;
    }
  }
  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done == n; }

  const int n;
  std::atomic<int> next{0};
  absl::Mutex mu;
  int done ABSL_GUARDED_BY(mu) = 0;
  std::vector<absl::Status> results ABSL_GUARDED_BY(mu);
};

}  // namespace

Client::Impl::Impl(ClientOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(RaiseStreams(std::move(options))),
      metrics_(options_.metrics.get(), options_.servers),
      token_(options_.job_token),
      retrier_(options_, &metrics_, &shutdown_, &token_),
      gathers_in_place_(AllServersOnThisHost(options_)),
      pool_(std::make_unique<ThreadPool>(PoolThreads(options_))),
      gather_pool_(std::make_unique<ThreadPool>(
          PoolThreads(options_), gathers_in_place_ ? kMaxSameHostGatherStreams : 0)),
      control_pool_(std::make_unique<ThreadPool>(ControlThreads(options_))) {
  for (int i = 0; i < static_cast<int>(options_.servers.size()); ++i) {
    servers_.push_back(std::make_unique<ServerConn>(options_, i, credentials));
  }
  if (options_.keepalive_time.count() > 0 && options_.data_plane) {
    watch_ = std::make_unique<ChannelWatch>(servers_, kChannelWatchPeriod);
  }
}

Client::Impl::~Impl() {
  watch_.reset();
  shutdown_.Notify();
  control_pool_.reset();
  gather_pool_.reset();
  pool_.reset();
}

absl::Status Client::Impl::ForEachServer(absl::FunctionRef<absl::Status(int)> fn) {
  // Not the streams' pools: a Step must never queue behind streams. The
  // pool's tasks hold the fan-out, not `fn`, past this call.
  auto fan = std::make_shared<FanOut>(num_servers());
  for (int s = 1; s < num_servers(); ++s) {
    control_pool_->Schedule([fan, fnp = &fn] { fan->Run(fnp); });
  }
  fan->Run(&fn);
  absl::MutexLock lock(&fan->mu);
  fan->mu.Await(absl::Condition(fan.get(), &FanOut::AllDone));
  for (absl::Status& s : fan->results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options(); }

absl::StatusOr<std::shared_ptr<SharedBuffer>> Client::AllocateShared(size_t bytes) {
  return impl_->shared_buffers().Allocate(bytes);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  auto credentials = ChannelCredentialsFor(options);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<Client>(
      new Client(std::make_shared<Impl>(std::move(options), *std::move(credentials))));
}

absl::StatusOr<std::unique_ptr<JobClient>> Client::RegisterJob(const v1::JobSpec& spec) {
  absl::StatusOr<v1::JobSpec> normalized = NormalizeJobSpec(spec);
  if (!normalized.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", normalized.status().message()));
  }
  return JobClient::Impl::Register(impl_, *std::move(normalized));
}

absl::StatusOr<std::unique_ptr<JobClient>> Client::AttachJob(const std::string& job_id) {
  if (absl::Status s = ValidateJobId(job_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job_id: ", s.message()));
  }
  return JobClient::Impl::Attach(impl_, job_id);
}

absl::StatusOr<std::unique_ptr<JobClient>> Client::RestoreJob(const std::string& path,
                                                               uint32_t num_nodes) {
  if (path.empty()) return absl::InvalidArgumentError("path: empty checkpoint path");
  return JobClient::Impl::Restore(impl_, path, num_nodes);
}

absl::StatusOr<std::vector<std::string>> Client::Rendezvous(const std::string& ns,
                                                            const std::string& key,
                                                            uint32_t rank, uint32_t world,
                                                            const std::string& value) {
  if (world == 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " is out of range [0, world=", world, ")"));
  }
  if (value.size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: ", value.size(), " bytes, at most 4096"));
  }
  v1::RendezvousRequest req;
  req.set_job_id(ns);
  req.set_key(key);
  req.set_rank(rank);
  req.set_world(world);
  req.set_value(value);
  v1::RendezvousResponse resp;
  absl::Status s =
      impl_->Unary(Method::kRendezvous, 0, &v1::StateService::Stub::Rendezvous, req, &resp);
  if (!s.ok()) return s;
  if (resp.values_size() != static_cast<int>(world)) {
    return absl::InternalError(absl::StrCat("Rendezvous to ", impl_->server(0).address(), ": ",
                                            resp.values_size(), " values for world ", world));
  }
  return std::vector<std::string>(resp.values().begin(), resp.values().end());
}

}  // namespace zerostate::client
