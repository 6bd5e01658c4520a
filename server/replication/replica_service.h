// The backup's side of replicated shards: ReplicaService on the
// state server's gRPC port (proto/zerostate/v1/replica.proto). ApplyStep
// runs a primary's step on this server's copy of the shard, with the sums
// the primary sent ahead on the data plane (REPLICA_SUM frames, kept here
// as ReplicaSums per (job, shard), one transfer each, in KeptSums until
// that ApplyStep takes them or the job is deleted); ReadShard
// serves a copy's state (checks); Seed replaces a lost copy's state with
// its primary's (catch-up). Every call is authorized with
// the job's token, as StateService calls are. A step, a sum or a seed
// stamped with its primary's term is admitted by AcceptedTerms (a term
// older than one the copy accepted is refused ABORTED, naming both); an
// unstamped one (a server that predates terms) is not checked.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/core/held_steps.h"
#include "server/core/job_registry.h"
#include "server/core/primaries.h"
#include "server/core/replica_sums.h"
#include "server/core/thread_pool.h"
#include "server/replication/accepted_terms.h"
#include "server/replication/kept_sums.h"
#include "zerostate/v1/replica.grpc.pb.h"

namespace zerostate::server {

class ReplicaServiceImpl final : public v1::ReplicaService::Service, public ReplicaSums {
 public:
  // Testing (the server's --test_seed_hold): called by Seed with the
  // shard it seeds at two points, "blocks" (the first block read, the rest
  // not yet) and "applied" (the copy took the state, Seed not answered
  // yet), so a test can kill a server in the middle of a catch-up.
  using SeedHook = std::function<void(std::string_view phase, uint32_t shard)>;

  // All references must outlive the service; `primaries` may be null (no
  // replicated job can then be served as primary here); `seed_hook` may be
  // empty. The REPLICA_SUMs are kept in `kept`, the primaries' terms in
  // `terms` (both emptied of a deleted job's: Replicator::Forget).
  // `held`: how a copy applies the steps it acknowledged (HeldSteps::Options).
  ReplicaServiceImpl(JobRegistry& jobs, ThreadPool& pool, const Primaries* primaries,
                     KeptSums& kept, AcceptedTerms& terms, SeedHook seed_hook = {},
                     HeldSteps::Options held = HeldSteps::Options())
      : jobs_(jobs),
        pool_(pool),
        primaries_(primaries),
        kept_(kept),
        terms_(terms),
        seed_hook_(std::move(seed_hook)),
        held_(held) {}

  // This server's data plane port (0: none, the default), which ApplyStep
  // answers so that the primary sends later sums there. Set once the data
  // plane (which serves this object's REPLICA_SUMs) has started.
  void SetDataPort(uint32_t port) { data_port_.store(port, std::memory_order_relaxed); }

  grpc::Status ApplyStep(grpc::ServerContext* ctx, grpc::ServerReader<v1::ReplicaStepPart>* reader,
                         v1::ReplicaStepResponse* resp) override;
  grpc::Status ReadShard(grpc::ServerContext* ctx, const v1::ReadShardRequest* req,
                         grpc::ServerWriter<v1::ShardBlock>* writer) override;
  grpc::Status Seed(grpc::ServerContext* ctx, grpc::ServerReader<v1::SeedPart>* reader,
                    v1::SeedResponse* resp) override;

  // ReplicaSums: the data plane's REPLICA_SUM frames.
  [[nodiscard]] absl::Status Check(const std::string& token, const v1::ReplicaSum& sum,
                                   uint64_t bytes) const override;
  [[nodiscard]] absl::Status Keep(const v1::ReplicaSum& sum, std::string bytes) override;
  SumBuffers& buffers() override { return kept_; }

 private:
  // ABORTED when this server serves (job, shard) as primary: its copy
  // takes no step or state (`what`) from another, who is no longer the
  // primary (fencing: the sender must stop answering as primary). The
  // message names this server and its term's epoch.
  [[nodiscard]] absl::Status CheckNotPrimary(const std::string& job, uint32_t shard,
                                             const char* what) const;
  // CheckNotPrimary, then the sender's `term` (when the message carries
  // one) admitted by terms_ (ABORTED when older than the copy accepted).
  [[nodiscard]] absl::Status CheckSender(const std::string& job, uint32_t shard,
                                         const v1::SenderTerm* term, const char* what) const;
  // CheckSender, then FAILED_PRECONDITION "needs a catch-up" when the
  // copy is deposed (JobStep::MarkDeposed): it holds a step no primary
  // acknowledged, so it takes a step only once a Seed replaced its state.
  [[nodiscard]] absl::Status CheckTakesSteps(const Job& copy, const v1::SenderTerm* term,
                                             const char* what) const;

  // The start of ApplyStep: the token, the first message (into `first`),
  // and the copy it names, which takes steps from a primary (not served
  // here as primary).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> OpenStep(
      grpc::ServerContext& ctx, grpc::ServerReader<v1::ReplicaStepPart>& reader,
      v1::ReplicaStepPart* first) const;
  // The copy of `shard` of `job` a primary's step or sums (`what`, sent
  // under `term`, null: unstamped) go to: authorized by `token`, held
  // here, taking steps (CheckTakesSteps).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> CopyFor(const std::string& job,
                                                             const std::string& token,
                                                             uint32_t shard,
                                                             const v1::SenderTerm* term,
                                                             const char* what) const;

  JobRegistry& jobs_;
  ThreadPool& pool_;
  const Primaries* const primaries_;
  std::atomic<uint32_t> data_port_{0};
  KeptSums& kept_;  // (job, shard) -> the sums of one transfer
  AcceptedTerms& terms_;  // (job, shard) -> the newest primary term accepted
  const SeedHook seed_hook_;
  const HeldSteps::Options held_;
};

}  // namespace zerostate::server
