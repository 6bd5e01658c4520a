#include "server/replication/replica_service.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc_status.h"
#include "server/core/aligned_buffer.h"
#include "server/core/auth_token.h"
#include "server/core/reseed.h"
#include "server/rpc/call_token.h"

namespace zerostate::server {

absl::Status ReplicaServiceImpl::CheckNotPrimary(const std::string& job, uint32_t shard,
                                                 const char* what) const {
  if (primaries_ == nullptr) return absl::OkStatus();
  std::optional<PrimaryTerm> term = primaries_->Serving(job, shard);
  if (!term.has_value()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("shard ", shard, " of job '", job,
                                         "' has a newer primary: this server, ", term->primary,
                                         " (epoch ", term->epoch, "); a ", what,
                                         " from another is refused"));
}

absl::Status ReplicaServiceImpl::CheckSender(const std::string& job, uint32_t shard,
                                             const v1::SenderTerm* term, const char* what) const {
  if (auto s = CheckNotPrimary(job, shard, what); !s.ok()) return s;
  if (term == nullptr) return absl::OkStatus();
  return terms_.Admit(job, shard, PrimaryTerm{term->primary(), term->epoch()}, what);
}

absl::Status ReplicaServiceImpl::CheckTakesSteps(const Job& copy, const v1::SenderTerm* term,
                                                 const char* what) const {
  if (auto s = CheckSender(copy.spec().job_id(), copy.shard_index(), term, what); !s.ok()) {
    return s;
  }
  if (auto s = copy.step().CheckNotDeposed(); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", copy.shard_index(), " of job '", copy.spec().job_id(),
                     "': this copy needs a catch-up before it can take a ", what, " (",
                     s.message(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> ReplicaServiceImpl::CopyFor(const std::string& job,
                                                                 const std::string& token,
                                                                 uint32_t shard,
                                                                 const v1::SenderTerm* term,
                                                                 const char* what) const {
  auto copy = jobs_.Shard(job, token, shard);
  if (!copy.ok()) return copy.status();
  if (auto s = CheckTakesSteps(**copy, term, what); !s.ok()) return s;
  return copy;
}

absl::StatusOr<std::shared_ptr<Job>> ReplicaServiceImpl::OpenStep(
    grpc::ServerContext& ctx, grpc::ServerReader<v1::ReplicaStepPart>& reader,
    v1::ReplicaStepPart* first) const {
  auto token = TokenOf(ctx);
  if (!token.ok()) return token.status();
  if (!reader.Read(first)) {
    return absl::InvalidArgumentError("ApplyStep: the stream carried no message");
  }
  return CopyFor(first->job_id(), *token, first->shard(),
                 first->has_term() ? &first->term() : nullptr, "step");
}

absl::Status ReplicaServiceImpl::Check(const std::string& token, const v1::ReplicaSum& sum,
                                       uint64_t bytes) const {
  auto job = CopyFor(sum.job_id(), token, sum.shard(), sum.has_term() ? &sum.term() : nullptr,
                     "step's sum");
  if (!job.ok()) return job.status();
  if (sum.transfer() == 0) {
    return absl::InvalidArgumentError("REPLICA_SUM: replica_sum.transfer must not be 0");
  }
  const Range blocks = (*job)->blocks();
  if (sum.block() < blocks.begin || sum.block() >= blocks.end) {
    return absl::InvalidArgumentError(absl::StrCat("REPLICA_SUM: block ", sum.block(),
                                                   " is outside shard ", sum.shard(), " [",
                                                   blocks.begin, ", ", blocks.end, ")"));
  }
  const uint64_t want = uint64_t{(*job)->shard().block(sum.block()).required} * sizeof(float);
  if (bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat("REPLICA_SUM: block ", sum.block(), " carries ",
                                                   bytes, " bytes of sum; it needs ", want));
  }
  return absl::OkStatus();
}

absl::Status ReplicaServiceImpl::Keep(const v1::ReplicaSum& sum, std::string bytes) {
  return kept_.Keep(sum.job_id(), sum.shard(), sum.transfer(), sum.block(), std::move(bytes));
}

grpc::Status ReplicaServiceImpl::ApplyStep(grpc::ServerContext* ctx,
                                           grpc::ServerReader<v1::ReplicaStepPart>* reader,
                                           v1::ReplicaStepResponse* resp) {
  v1::ReplicaStepPart first;
  auto job = OpenStep(*ctx, *reader, &first);
  if (!job.ok()) return ToGrpcStatus(job.status());
  // A whole step carries its request first, a streamed one last.
  std::optional<v1::StepRequest> req;
  if (first.has_step()) req = first.step();
  std::vector<std::pair<uint64_t, std::string>> grads;
  v1::ReplicaStepPart part;
  while (reader->Read(&part)) {
    if (!part.has_step()) {
      grads.emplace_back(part.block(), std::move(*part.mutable_grad()));
      continue;
    }
    if (req.has_value()) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "ApplyStep: a second step request (step ", part.step().step(), ", after step ",
          req->step(), ")")));
    }
    req = part.step();
  }
  if (!req.has_value()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "ApplyStep: the stream ended without the step request (nothing was applied)"));
  }
  if (first.transfer() != 0) {  // the sums sent ahead on the data plane
    for (auto& sum : kept_.Take(first.job_id(), first.shard(), first.transfer())) {
      grads.push_back(std::move(sum));
    }
  }
  // Acknowledged once held; applied behind the primary (HeldSteps).
  std::shared_ptr<Job> copy = *std::move(job);
  std::vector<uint64_t> sizes;
  for (const auto& [block, sum] : grads) sizes.push_back(sum.size());
  auto held = copy->held().Hold(*req, std::move(grads), pool_, held_.max_held, &kept_);
  if (!held.ok()) return ToGrpcStatus(held.status());
  // The first step held makes the buffers of the next ones (KeptSums).
  if (*held) kept_.Provide(first.job_id(), first.shard(), sizes);
  if (*held && !held_.lazy_apply) {
    pool_.Schedule([copy] { (void)copy->held().ApplyOne(); });  // an error deposes the copy
  }
  resp->set_version(req->step() + 1);
  resp->set_already_applied(!*held);
  resp->set_data_port(data_port_.load(std::memory_order_relaxed));
  return grpc::Status::OK;
}

grpc::Status ReplicaServiceImpl::ReadShard(grpc::ServerContext* ctx,
                                           const v1::ReadShardRequest* req,
                                           grpc::ServerWriter<v1::ShardBlock>* writer) {
  auto token = TokenOf(*ctx);
  if (!token.ok()) return ToGrpcStatus(token.status());
  auto job = jobs_.Shard(req->job_id(), *token, req->shard());
  if (!job.ok()) return ToGrpcStatus(job.status());
  // The steps the copy acknowledged are part of its state.
  if (auto s = (*job)->held().ApplyAll(); !s.ok()) return ToGrpcStatus(s);
  const auto d = ctx->deadline();
  const absl::Time deadline = d == std::chrono::system_clock::time_point::max()
                                  ? absl::Now() + absl::Minutes(10)
                                  : absl::FromChrono(d);
  AlignedBuffer<float> state((*job)->shard().tier_shape().block_floats());
  v1::ShardBlock out;
  for (uint64_t local = 0; local < (*job)->blocks().size(); ++local) {
    uint64_t version = 0;
    if (auto s = (*job)->gathers().ReadBlock(local, req->min_version(), deadline, state.data(),
                                             &version);
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    out.set_block((*job)->blocks().begin + local);
    out.set_version(version);
    out.set_applied_steps((*job)->step().applied_steps().Before(version));
    out.set_state(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
    if (!writer->Write(out)) return grpc::Status(grpc::StatusCode::CANCELLED, "reader went away");
  }
  return grpc::Status::OK;
}

grpc::Status ReplicaServiceImpl::Seed(grpc::ServerContext* ctx,
                                      grpc::ServerReader<v1::SeedPart>* reader,
                                      v1::SeedResponse* resp) {
  auto token = TokenOf(*ctx);
  if (!token.ok()) return ToGrpcStatus(token.status());
  v1::SeedPart first;
  if (!reader->Read(&first)) {
    return ToGrpcStatus(absl::InvalidArgumentError("Seed: the stream carried no message"));
  }
  if (first.registration().spec().job_id() != first.job_id()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("Seed: registration.spec.job_id '", first.registration().spec().job_id(),
                     "' is not job_id '", first.job_id(), "'")));
  }
  // A server that restarted empty gets the job back here, every copy
  // deposed until its seed commits.
  if (!jobs_.Authorize(first.job_id(), *token).ok()) {
    auto registered = jobs_.Register(first.registration(), *token);
    if (!registered.ok()) return ToGrpcStatus(registered.status());
    if (registered->created) {
      Reseed::DeposeRegistered(jobs_, first.job_id(),
                               static_cast<uint32_t>(first.registration().servers_size()));
    }
  }
  auto job = jobs_.Shard(first.job_id(), *token, first.shard());
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (auto s = CheckSender(first.job_id(), first.shard(),
                          first.has_term() ? &first.term() : nullptr, "catch-up");
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  auto reseed = Reseed::Begin(**job, {first.shard(), first.version(), first.applied_steps(),
                                      first.trainer_state()});
  if (!reseed.ok()) return ToGrpcStatus(reseed.status());
  v1::SeedPart part;
  while (reader->Read(&part)) {
    v1::ShardBlock& b = *part.mutable_block();
    if (auto s = reseed->Add(b.block(), b.version(), std::move(*b.mutable_state())); !s.ok()) {
      return ToGrpcStatus(s);
    }
    if (seed_hook_ && reseed->received() == 1) seed_hook_("blocks", first.shard());
  }
  (*job)->held().Drop();  // steps held before the state they would follow is replaced
  if (auto s = reseed->Commit(); !s.ok()) return ToGrpcStatus(s);
  if (seed_hook_) seed_hook_("applied", first.shard());
  resp->set_version(first.version());
  return grpc::Status::OK;
}

}  // namespace zerostate::server
