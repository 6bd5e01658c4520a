#include "server/replication/replicator.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "grpcpp/create_channel.h"
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

// Sends one shard's steps to its live copies but this server.
class ShardReplicator final : public StepReplicator {
 public:
  ShardReplicator(Replicator& owner, std::string job_id, uint32_t shard, uint64_t blocks,
                  std::vector<std::pair<uint32_t, std::string>> copies, std::string token)
      : owner_(owner),
        job_id_(std::move(job_id)),
        shard_(shard),
        blocks_(blocks),
        copies_(std::move(copies)),
        token_(std::move(token)) {}

  std::function<absl::Status()> Start(std::shared_ptr<const Payload> payload) override {
    struct Call {
      uint32_t server;
      std::string address;
      absl::Status status;
      std::thread thread;
    };
    auto calls = std::make_shared<std::vector<Call>>();
    for (const auto& [server, address] : copies_) {
      if (owner_.IsLost({job_id_, shard_, server})) continue;
      calls->push_back(Call{server, address, absl::OkStatus(), {}});
    }
    for (Call& c : *calls) {
      c.thread = std::thread([this, &c, payload] {
        c.status = owner_.Send(c.address, token_, shard_, job_id_, *payload);
      });
    }
    const uint64_t step = payload->request.step();
    return [this, calls, step]() -> absl::Status {
      absl::Status first;
      for (Call& c : *calls) {
        c.thread.join();
        const absl::Status& s = c.status;
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
  const std::string job_id_;
  const uint32_t shard_;
  const uint64_t blocks_;
  const std::vector<std::pair<uint32_t, std::string>> copies_;  // server index, address
  const std::string token_;
};

std::unique_ptr<StepReplicator> Replicator::For(const Job& job, uint32_t self, std::string token) {
  const uint32_t k = job.spec().replicas();
  if (k == 0) return nullptr;
  const auto& servers = job.servers();
  std::vector<std::pair<uint32_t, std::string>> copies;
  for (uint32_t s : ReplicaServers(servers.size(), job.shard_index(), k)) {
    if (s != self) copies.emplace_back(s, servers[s]);
  }
  return std::make_unique<ShardReplicator>(*this, job.spec().job_id(), job.shard_index(),
                                           job.blocks().size(), std::move(copies),
                                           std::move(token));
}

v1::ReplicaService::Stub& Replicator::Peer(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = peers_[address];
  if (stub == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    stub =
        v1::ReplicaService::NewStub(grpc::CreateCustomChannel(address, options_.credentials, args));
  }
  return *stub;
}

absl::Status Replicator::Send(const std::string& address, const std::string& token, uint32_t shard,
                              const std::string& job_id, const StepReplicator::Payload& payload) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  ctx.AddMetadata(kJobTokenMetadata, token);
  v1::ReplicaStepResponse resp;
  auto writer = Peer(address).ApplyStep(&ctx, &resp);
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
  grpc::Status s = writer->Finish();
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return absl::OkStatus();
}

bool Replicator::IsLost(const CopyKey& key) const {
  absl::MutexLock lock(&mu_);
  return lost_.contains(key);
}

void Replicator::MarkLost(const CopyKey& key, uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  lost_.insert(key);
  under_[{std::get<0>(key), std::get<1>(key)}] = blocks;
}

uint64_t Replicator::under_replicated_blocks() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [key, blocks] : under_) total += blocks;
  return total;
}

}  // namespace zerostate::server
