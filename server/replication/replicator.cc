#include "server/replication/replicator.h"

#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "grpcpp/create_channel.h"
#include "server/core/aligned_buffer.h"
#include "server/core/auth_token.h"

namespace zerostate::server {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentialsFor(
    const TlsOptions& tls, const std::string& peer_ca_file) {
  if (tls.plaintext) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;  // no CA file: the system's roots
  const std::string& ca_file = peer_ca_file.empty() ? tls.client_ca_file : peer_ca_file;
  if (!ca_file.empty()) {
    auto ca = ReadPemFile(peer_ca_file.empty() ? "--tls_client_ca" : "--peer_tls_ca", ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  auto cert = ReadPemFile("--tls_cert", tls.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile("--tls_key", tls.key_file);
  if (!key.ok()) return key.status();
  ssl.pem_cert_chain = *cert;
  ssl.pem_private_key = *key;
  return grpc::SslCredentials(ssl);
}

namespace {

// The shard's state as a lost copy gets it (Replicator::Seed).
struct ShardSnapshot {
  v1::SeedPart first;  // job, shard, version, applied steps, trainer state
  std::vector<v1::ShardBlock> blocks;
  uint64_t bytes = 0;
};

// Reads every block of `job`'s shard at the shard's version (JobGathers::
// ReadBlockAt: called by the Step before its pass). Errors:
// FAILED_PRECONDITION when the blocks are at different versions; the
// tier's.
absl::StatusOr<std::shared_ptr<const ShardSnapshot>> SnapshotOf(Job& job) {
  auto snap = std::make_shared<ShardSnapshot>();
  snap->first.set_version(job.shard().Progress().min_version);
  AlignedBuffer<float> state(job.shard().tier_shape().block_floats());
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    if (auto s = job.gathers().ReadBlockAt(local, snap->first.version(), state.data()); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("shard ", job.shard_index(), ": ", s.message()));
    }
    v1::ShardBlock& b = snap->blocks.emplace_back();
    b.set_block(job.blocks().begin + local);
    b.set_version(snap->first.version());
    b.set_state(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
    snap->bytes += b.state().size();
  }
  const uint64_t version = snap->first.version();
  snap->first.set_job_id(job.spec().job_id());
  snap->first.set_shard(job.shard_index());
  snap->first.set_applied_steps(job.step().applied_steps().Before(version));
  if (auto ts = job.step().trainer_states().Find(version)) snap->first.set_trainer_state(*ts);
  *snap->first.mutable_registration()->mutable_spec() = job.spec();
  for (const std::string& server : job.servers()) snap->first.mutable_registration()->add_servers(server);
  return snap;
}

}  // namespace

// Sends one shard's steps to its live copies but this server, and catches
// lost ones up when their server is back.
class ShardReplicator final : public StepReplicator {
 public:
  ShardReplicator(Replicator& owner, Job& job, std::vector<std::pair<uint32_t, std::string>> copies,
                  std::string token)
      : owner_(owner),
        job_(job),
        job_id_(job.spec().job_id()),
        shard_(job.shard_index()),
        blocks_(job.blocks().size()),
        copies_(std::move(copies)),
        token_(std::move(token)) {}

  std::function<absl::Status()> Start(std::shared_ptr<const Payload> payload) override {
    struct Call {
      uint32_t server;
      std::string address;
      bool catch_up = false;  // Seed first; the copy is lost until both are acknowledged
      absl::Status status;
      std::thread thread;
    };
    auto calls = std::make_shared<std::vector<Call>>();
    std::shared_ptr<const ShardSnapshot> snapshot;  // read once, before the pass moves the state
    for (const auto& [server, address] : copies_) {
      const bool lost = owner_.IsLost({job_id_, shard_, server});
      if (lost) {
        if (!owner_.Reconnect(address)) continue;
        if (snapshot == nullptr) {
          auto snap = SnapshotOf(job_);
          if (!snap.ok()) continue;
          snapshot = *std::move(snap);
        }
      }
      calls->push_back(Call{server, address, lost, absl::OkStatus(), {}});
    }
    for (Call& c : *calls) {
      c.thread = std::thread([this, &c, payload, snapshot] {
        if (c.catch_up) {
          v1::SeedPart first = snapshot->first;
          first.mutable_registration()->set_shard_index(c.server);
          c.status = owner_.Seed(c.address, token_, first, snapshot->blocks);
          if (!c.status.ok()) return;
        }
        c.status = owner_.Send(c.address, token_, shard_, job_id_, *payload);
      });
    }
    const uint64_t step = payload->request.step();
    const uint64_t seed_bytes = snapshot == nullptr ? 0 : snapshot->bytes;
    return [this, calls, step, seed_bytes]() -> absl::Status {
      absl::Status first;
      for (Call& c : *calls) {
        c.thread.join();
        const absl::Status& s = c.status;
        if (c.catch_up) {  // a failed catch-up leaves the copy lost, the Step unharmed
          if (s.ok()) owner_.Revive({job_id_, shard_, c.server}, seed_bytes);
          continue;
        }
        if (s.ok()) continue;
        if (absl::IsUnavailable(s) || absl::IsNotFound(s) || absl::IsFailedPrecondition(s) ||
            absl::IsDeadlineExceeded(s)) {
          owner_.MarkLost({job_id_, shard_, c.server}, blocks_);
          continue;
        }
        if (first.ok()) {
          first = absl::UnavailableError(absl::StrCat("step ", step, " of shard ", shard_,
                                                      ": backup ", c.address,
                                                      " did not acknowledge it: ", s.message()));
        }
      }
      return first;
    };
  }

 private:
  Replicator& owner_;
  Job& job_;
  const std::string job_id_;
  const uint32_t shard_;
  const uint64_t blocks_;
  const std::vector<std::pair<uint32_t, std::string>> copies_;  // server index, address
  const std::string token_;
};

std::unique_ptr<StepReplicator> Replicator::For(Job& job, uint32_t self, std::string token) {
  const uint32_t k = job.spec().replicas();
  if (k == 0) return nullptr;
  const auto& servers = job.servers();
  std::vector<std::pair<uint32_t, std::string>> copies;
  for (uint32_t s : ReplicaServers(servers.size(), job.shard_index(), k)) {
    if (s != self) copies.emplace_back(s, servers[s]);
  }
  return std::make_unique<ShardReplicator>(*this, job, std::move(copies), std::move(token));
}

namespace {

grpc::ChannelArguments PeerChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return args;
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

std::shared_ptr<v1::ReplicaService::Stub> Replicator::Peer(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = peers_[address];
  if (stub == nullptr) {
    stub = v1::ReplicaService::NewStub(
        grpc::CreateCustomChannel(address, options_.credentials, PeerChannelArgs()));
  }
  return stub;
}

bool Replicator::Reconnect(const std::string& address) {
  // Its own subchannel: not one in a reconnect backoff since the server died.
  grpc::ChannelArguments args = PeerChannelArgs();
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(address, options_.credentials, args);
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.reconnect_timeout);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!channel->WaitForStateChange(state, deadline)) return false;
    state = channel->GetState(/*try_to_connect=*/true);
  }
  absl::MutexLock lock(&mu_);
  peers_[address] = v1::ReplicaService::NewStub(channel);
  return true;
}

void Replicator::PrepareCall(grpc::ClientContext& ctx, const std::string& token) const {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  ctx.AddMetadata(kJobTokenMetadata, token);
}

absl::Status Replicator::Seed(const std::string& address, const std::string& token,
                              const v1::SeedPart& first,
                              const std::vector<v1::ShardBlock>& blocks) {
  grpc::ClientContext ctx;
  PrepareCall(ctx, token);
  v1::SeedResponse resp;
  auto stub = Peer(address);
  auto writer = stub->Seed(&ctx, &resp);
  bool ok = writer->Write(first);
  v1::SeedPart part;
  for (const v1::ShardBlock& b : blocks) {
    if (!ok) break;
    *part.mutable_block() = b;
    ok = writer->Write(part);
  }
  writer->WritesDone();
  return FromGrpc(writer->Finish());
}

absl::Status Replicator::Send(const std::string& address, const std::string& token, uint32_t shard,
                              const std::string& job_id, const StepReplicator::Payload& payload) {
  grpc::ClientContext ctx;
  PrepareCall(ctx, token);
  v1::ReplicaStepResponse resp;
  auto stub = Peer(address);
  auto writer = stub->ApplyStep(&ctx, &resp);
  v1::ReplicaStepPart part;
  part.set_job_id(job_id);
  part.set_shard(shard);
  *part.mutable_step() = payload.request;
  bool ok = writer->Write(part);
  part.clear_step();
  for (const auto& [block, grad] : payload.grads) {
    if (!ok) break;
    part.set_block(block);
    part.set_grad(grad);
    ok = writer->Write(part);
  }
  writer->WritesDone();
  return FromGrpc(writer->Finish());
}

bool Replicator::IsLost(const CopyKey& key) const {
  absl::MutexLock lock(&mu_);
  return lost_.contains(key);
}

void Replicator::MarkLost(const CopyKey& key, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  lost_.insert(key);
  under_[{std::get<0>(key), std::get<1>(key)}] = blocks;
  PublishLocked();
}

void Replicator::Revive(const CopyKey& key, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  lost_.erase(key);
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  const std::string& job = std::get<0>(key);
  const uint32_t shard = std::get<1>(key);
  const bool still_under = absl::c_any_of(lost_, [&](const CopyKey& k) {
    return std::get<0>(k) == job && std::get<1>(k) == shard;
  });
  if (!still_under) under_.erase({job, shard});
  PublishLocked();
  if (options_.metrics != nullptr) options_.metrics->RecordCatchupBytes(bytes);
}

void Replicator::Forget(const std::string& job) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(lost_, [&](const CopyKey& k) { return std::get<0>(k) == job; });
  absl::erase_if(under_, [&](const auto& entry) { return entry.first.first == job; });
  PublishLocked();
}

void Replicator::PublishLocked() {
  if (options_.metrics == nullptr) return;
  uint64_t total = 0;
  for (const auto& [key, blocks] : under_) total += blocks;
  options_.metrics->SetUnderReplicatedBlocks(total);
}

uint64_t Replicator::under_replicated_blocks() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [key, blocks] : under_) total += blocks;
  return total;
}

}  // namespace zerostate::server
