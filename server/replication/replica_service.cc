#include "server/replication/replica_service.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc_status.h"
#include "server/core/aligned_buffer.h"
#include "server/core/auth_token.h"
#include "server/rpc/call_token.h"

namespace zerostate::server {

grpc::Status ReplicaServiceImpl::ApplyStep(grpc::ServerContext* ctx,
                                           grpc::ServerReader<v1::ReplicaStepPart>* reader,
                                           v1::ReplicaStepResponse* resp) {
  auto token = TokenOf(*ctx);
  if (!token.ok()) return ToGrpcStatus(token.status());
  v1::ReplicaStepPart first;
  if (!reader->Read(&first)) {
    return ToGrpcStatus(absl::InvalidArgumentError("ApplyStep: the stream carried no message"));
  }
  auto job = jobs_.Shard(first.job_id(), *token, first.shard());
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (primaries_ != nullptr && primaries_->Serving(first.job_id(), first.shard())) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("shard ", first.shard(), " of job '", first.job_id(),
                     "' is served by this server as primary now; it takes no step from another")));
  }
  std::vector<std::pair<uint64_t, std::string>> grads;
  v1::ReplicaStepPart part;
  while (reader->Read(&part)) grads.emplace_back(part.block(), std::move(*part.mutable_grad()));
  auto out = (*job)->ApplyReplicatedStep(first.step(), grads, pool_);
  if (!out.ok()) return ToGrpcStatus(out.status());
  resp->set_version(first.step().step() + 1);
  resp->set_already_applied(out->already_applied);
  return grpc::Status::OK;
}

grpc::Status ReplicaServiceImpl::ReadShard(grpc::ServerContext* ctx,
                                           const v1::ReadShardRequest* req,
                                           grpc::ServerWriter<v1::ShardBlock>* writer) {
  auto token = TokenOf(*ctx);
  if (!token.ok()) return ToGrpcStatus(token.status());
  auto job = jobs_.Shard(req->job_id(), *token, req->shard());
  if (!job.ok()) return ToGrpcStatus(job.status());
  const auto d = ctx->deadline();
  const absl::Time deadline = d == std::chrono::system_clock::time_point::max()
                                  ? absl::Now() + absl::Minutes(10)
                                  : absl::FromChrono(d);
  AlignedBuffer<float> state((*job)->tier_shape().block_floats());
  v1::ShardBlock out;
  for (uint64_t local = 0; local < (*job)->blocks().size(); ++local) {
    uint64_t version = 0;
    if (auto s = (*job)->ReadBlock(local, req->min_version(), deadline, state.data(), &version);
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    out.set_block((*job)->blocks().begin + local);
    out.set_version(version);
    out.set_applied_steps((*job)->AppliedStepsBefore(version));
    out.set_state(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
    if (!writer->Write(out)) return grpc::Status(grpc::StatusCode::CANCELLED, "reader went away");
  }
  return grpc::Status::OK;
}

}  // namespace zerostate::server
