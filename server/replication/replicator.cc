#include "server/replication/replicator.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/data_tls.h"
#include "common/frame_io.h"
#include "common/shard_map.h"
#include "grpcpp/create_channel.h"
#include "server/core/auth_token.h"
#include "server/replication/shard_replicator.h"

namespace zerostate::server {

namespace {

// The PEM files of a server's identity towards its peers: the CA it trusts
// them by (empty: the system's roots), its certificate and key.
struct PeerPems {
  std::string ca, cert, key;
};

absl::StatusOr<PeerPems> ReadPeerPems(const TlsOptions& tls, const std::string& peer_ca_file) {
  PeerPems pems;
  const std::string& ca_file = peer_ca_file.empty() ? tls.client_ca_file : peer_ca_file;
  if (!ca_file.empty()) {
    auto ca = ReadPemFile(peer_ca_file.empty() ? "--tls_client_ca" : "--peer_tls_ca", ca_file);
    if (!ca.ok()) return ca.status();
    pems.ca = *std::move(ca);
  }
  auto cert = ReadPemFile("--tls_cert", tls.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile("--tls_key", tls.key_file);
  if (!key.ok()) return key.status();
  pems.cert = *std::move(cert);
  pems.key = *std::move(key);
  return pems;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentialsFor(
    const TlsOptions& tls, const std::string& peer_ca_file) {
  if (tls.plaintext) return grpc::InsecureChannelCredentials();
  auto pems = ReadPeerPems(tls, peer_ca_file);
  if (!pems.ok()) return pems.status();
  grpc::SslCredentialsOptions ssl;  // no CA: the system's roots
  ssl.pem_root_certs = pems->ca;
  ssl.pem_cert_chain = pems->cert;
  ssl.pem_private_key = pems->key;
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> PeerDataTlsFor(const TlsOptions& tls,
                                                        const std::string& peer_ca_file,
                                                        bool kernel) {
  if (tls.plaintext) return nullptr;
  auto pems = ReadPeerPems(tls, peer_ca_file);
  if (!pems.ok()) return pems.status();
  return ClientTlsContext(pems->ca, pems->cert, pems->key, kernel);
}

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

// As the clients' channels (client/server_conn.cc): windows for several
// 1 MiB sums in flight from the start.
grpc::ChannelArguments PeerChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  args.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 4 << 20);
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20);
  args.SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20);
  return args;
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

std::string Replicator::Dial(const std::string& name) const {
  if (options_.names == nullptr) return name;
  absl::StatusOr<std::string> dial = options_.names->Resolve(name);
  return dial.ok() ? *dial : name;
}

std::shared_ptr<v1::ReplicaService::Stub> Replicator::Peer(const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(address);
    if (it != peers_.end()) return it->second;
  }
  const std::string dial = Dial(address);
  auto stub = v1::ReplicaService::NewStub(
      grpc::CreateCustomChannel(dial, options_.credentials, PeerChannelArgs()));
  absl::MutexLock lock(&mu_);
  auto [it, made] = peers_.try_emplace(address, std::move(stub));
  if (made) dialled_[address] = dial;
  return it->second;
}

absl::StatusOr<std::unique_ptr<client::DataConn>> Replicator::Lane(const std::string& address) {
  std::shared_ptr<client::DataConnPool> pool;
  {
    absl::MutexLock lock(&mu_);
    auto it = lanes_.find(address);
    if (it == lanes_.end()) {
      return absl::NotFoundError(absl::StrCat("the data port of ", address, " is not known"));
    }
    pool = it->second;
  }
  return pool->Acquire(absl::Now() + options_.timeout);
}

void Replicator::Release(const std::string& address, std::unique_ptr<client::DataConn> conn) {
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find(address);
  if (it != lanes_.end()) it->second->Release(std::move(conn));
}

absl::Status Replicator::SendSum(client::DataConn& lane, const std::string& token,
                                 const v1::ReplicaSum& sum, std::string_view bytes) const {
  if (auto s = SendSumFrame(lane, token, sum, bytes); !s.ok()) return s;
  return RecvSumAck(lane);
}

absl::Status Replicator::SendSumFrame(client::DataConn& lane, const std::string& token,
                                      const v1::ReplicaSum& sum, std::string_view bytes) const {
  v1::DataFrameMeta meta;
  meta.set_token(token);
  *meta.mutable_replica_sum() = sum;
  lane.stream().SetDeadline(absl::Now() + options_.timeout);
  return SendFrame(lane.stream(), FrameType::kReplicaSum, meta, bytes.data(), bytes.size());
}

absl::Status Replicator::RecvSumAck(client::DataConn& lane) const {
  auto answer = RecvFrameStart(lane.stream());
  if (!answer.ok()) return answer.status();
  if (!answer->has_value()) return absl::UnavailableError("the backup closed the connection");
  const FrameStart& f = **answer;
  if (f.header.type != FrameType::kReplicaSumAck) {
    return absl::UnavailableError(absl::StrCat("the backup answered a REPLICA_SUM with ",
                                               FrameTypeName(static_cast<uint8_t>(f.header.type)),
                                               ": ", f.meta.message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(f.meta.code()), f.meta.message());
}

bool Replicator::Reconnect(const std::string& address) {
  // Its own subchannel: not one in a reconnect backoff since the server died.
  grpc::ChannelArguments args = PeerChannelArgs();
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const std::string dial = Dial(address);
  auto channel = grpc::CreateCustomChannel(dial, options_.credentials, args);
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.reconnect_timeout);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!channel->WaitForStateChange(state, deadline)) return false;
    state = channel->GetState(/*try_to_connect=*/true);
  }
  absl::MutexLock lock(&mu_);
  peers_[address] = v1::ReplicaService::NewStub(channel);
  dialled_[address] = dial;
  lanes_.erase(address);  // its data port is learned again
  return true;
}

void CallCanceller::Begin(grpc::ClientContext& ctx) {
  absl::MutexLock lock(&mu_);
  call_ = &ctx;
  if (cancelled_) ctx.TryCancel();
}

void CallCanceller::End() {
  absl::MutexLock lock(&mu_);
  call_ = nullptr;
}

void CallCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (call_ != nullptr) call_->TryCancel();
}

void Replicator::PrepareCall(grpc::ClientContext& ctx, const std::string& token) const {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  ctx.AddMetadata(kJobTokenMetadata, token);
}

void Replicator::StampTerm(const std::string& job, uint32_t shard, v1::SenderTerm* out) {
  if (options_.primaries == nullptr) return;
  std::optional<PrimaryTerm> now = options_.primaries->Serving(job, shard);
  absl::MutexLock lock(&mu_);
  if (now.has_value()) {
    terms_[{job, shard}] = *now;
  } else {
    auto it = terms_.find({job, shard});
    if (it == terms_.end()) return;
    now = it->second;
  }
  out->set_primary(now->primary);
  out->set_epoch(now->epoch);
}

absl::Status Replicator::Seed(const std::string& address, const std::string& token,
                              v1::SeedPart first, const std::vector<v1::ShardBlock>& blocks,
                              CallCanceller* cancel) {
  StampTerm(first.job_id(), first.shard(), first.mutable_term());
  grpc::ClientContext ctx;
  PrepareCall(ctx, token);
  if (cancel != nullptr) cancel->Begin(ctx);
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
  absl::Status s = FromGrpc(writer->Finish());
  if (cancel != nullptr) cancel->End();
  return s;
}

absl::Status Replicator::Send(const std::string& address, const std::string& token, uint32_t shard,
                              const std::string& job_id, const StepReplicator::Payload& payload,
                              uint64_t transfer, CallCanceller* cancel) {
  grpc::ClientContext ctx;
  PrepareCall(ctx, token);
  if (cancel != nullptr) cancel->Begin(ctx);
  v1::ReplicaStepResponse resp;
  auto stub = Peer(address);
  auto writer = stub->ApplyStep(&ctx, &resp);
  v1::ReplicaStepPart part;
  part.set_job_id(job_id);
  part.set_shard(shard);
  part.set_transfer(transfer);
  StampTerm(job_id, shard, part.mutable_term());
  *part.mutable_step() = payload.request;
  bool ok = writer->Write(part);
  part = v1::ReplicaStepPart();
  for (const auto& [block, grad] : payload.grads) {
    if (!ok || transfer != 0) break;
    part.set_block(block);
    part.set_grad(grad);
    ok = writer->Write(part);
  }
  writer->WritesDone();
  absl::Status s = FromGrpc(writer->Finish());
  if (cancel != nullptr) cancel->End();
  if (s.ok() && resp.data_port() != 0) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<client::DataConnPool>& pool = lanes_[address];
    auto dialled = dialled_.find(address);
    const std::string data =
        client::DataAddress(dialled != dialled_.end() ? dialled->second : address,
                            static_cast<int>(resp.data_port()));
    if (pool == nullptr || pool->address() != data) {
      pool = std::make_shared<client::DataConnPool>(data, std::max(1, options_.lanes),
                                                    options_.data_tls);
    }
  }
  return s;
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

absl::Status Replicator::RecordBehind(const CopyKey& key, const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    if (options_.primaries == nullptr || recorded_behind_.contains(key)) return absl::OkStatus();
  }
  absl::Status s = options_.primaries->SetBehind(std::get<0>(key), std::get<1>(key), address, true);
  if (!s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (lost_.contains(key)) recorded_behind_.insert(key);
  return absl::OkStatus();
}

void Replicator::Revive(const CopyKey& key, const std::string& address, uint64_t bytes) {
  bool recorded = false;
  {
    absl::MutexLock lock(&mu_);
    recorded = recorded_behind_.erase(key) > 0;
  }
  if (recorded) {
    (void)options_.primaries->SetBehind(std::get<0>(key), std::get<1>(key), address, false);
  }
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

void Replicator::Depose(const std::string& job, uint32_t shard) {
  if (options_.primaries != nullptr) options_.primaries->Fence(job, shard);
  absl::MutexLock lock(&mu_);
  const auto of_shard = [&](const CopyKey& k) {
    return std::get<0>(k) == job && std::get<1>(k) == shard;
  };
  absl::erase_if(lost_, of_shard);
  absl::erase_if(recorded_behind_, of_shard);
  under_.erase({job, shard});
  PublishLocked();
}

void Replicator::Forget(const std::string& job) {
  if (options_.kept_sums != nullptr) options_.kept_sums->Forget(job);
  if (options_.accepted_terms != nullptr) options_.accepted_terms->Forget(job);
  absl::MutexLock lock(&mu_);
  absl::erase_if(terms_, [&](const auto& entry) { return entry.first.first == job; });
  const auto of_job = [&](const CopyKey& k) { return std::get<0>(k) == job; };
  absl::erase_if(lost_, of_job);
  absl::erase_if(recorded_behind_, of_job);
  absl::erase_if(under_, [&](const auto& entry) { return entry.first.first == job; });
  PublishLocked();
}

void Replicator::AddBacklogBytes(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  backlog_bytes_ += bytes;
  if (options_.metrics != nullptr) options_.metrics->SetCatchupBacklogBytes(backlog_bytes_);
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
