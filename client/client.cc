// Client: connection setup, job registration and attachment, rendezvous.
#include <utility>

#include <thread>

#include "absl/strings/str_cat.h"
#include "client/channel_credentials.h"
#include "client/client_impl.h"
#include "client/job_client_impl.h"
#include "client/ticket_state.h"
#include "common/job_spec.h"
#include "client/validate.h"

namespace zerostate::client {
namespace {

int PoolThreads(const ClientOptions& o) {
  if (o.threads > 0) return o.threads;
  return std::max<int>(4, 2 * static_cast<int>(o.servers.size()) * o.streams_per_server);
}

}  // namespace

Client::Impl::Impl(ClientOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)),
      metrics_(options_.metrics.get(), options_.servers),
      token_(options_.job_token),
      retrier_(options_, &metrics_, &shutdown_, &token_),
      pool_(std::make_unique<ThreadPool>(PoolThreads(options_))),
      gather_pool_(std::make_unique<ThreadPool>(PoolThreads(options_))) {
  for (int i = 0; i < static_cast<int>(options_.servers.size()); ++i) {
    servers_.push_back(std::make_unique<ServerConn>(options_, i, credentials));
  }
}

Client::Impl::~Impl() {
  shutdown_.Notify();
  gather_pool_.reset();
  pool_.reset();
}

absl::Status Client::Impl::ForEachServer(absl::FunctionRef<absl::Status(int)> fn) {
  // Threads of their own, not a pool: a Step must never queue behind
  // streams. Shard 0 runs on the calling thread.
  std::vector<absl::Status> results(servers_.size());
  std::vector<std::thread> threads;
  for (int s = 1; s < num_servers(); ++s) {
    threads.emplace_back([&fn, &results, s] { results[s] = fn(s); });
  }
  results[0] = fn(0);
  for (std::thread& t : threads) t.join();
  for (absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options(); }

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
