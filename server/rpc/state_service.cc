#include "server/rpc/state_service.h"

#include <sys/statvfs.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rpc_status.h"
#include "server/core/answer_deadline.h"
#include "server/core/auth_token.h"
#include "server/core/checkpoint/checkpoint_writer.h"
#include "server/core/routing.h"
#include "server/rpc/call_token.h"
#include "server/rpc/job_proto.h"

namespace zerostate::server {

StateServiceImpl::StateServiceImpl(ServiceOptions options, JobRegistry& jobs,
                                   const PushHandler& pushes, const GatherHandler& gathers,
                                   RendezvousTable& rendezvous, ThreadPool& pool,
                                   ThreadPool& speculation_pool, ServerMetrics& metrics, uint64_t incarnation,
                                   Primaries* primaries, Replicator* replicator)
    : options_(options),
      jobs_(jobs),
      pushes_(pushes),
      gathers_(gathers),
      rendezvous_(rendezvous),
      pool_(pool),
      speculation_pool_(speculation_pool),
      metrics_(metrics),
      incarnation_(incarnation),
      primaries_(primaries),
      replicator_(replicator),
      streams_(options.max_streams, metrics),
      waits_(options.max_streams) {}

template <typename Body>
grpc::Status StateServiceImpl::Serve(const char* method, Body&& body) {
  absl::Time start = absl::Now();
  Traffic traffic;
  absl::Status status = body(traffic);
  return Record(method, start, traffic, status);
}

grpc::Status StateServiceImpl::Record(const char* method, absl::Time start,
                                      const Traffic& traffic, const absl::Status& status) {
  metrics_.RecordRpc(method, status, absl::ToDoubleSeconds(absl::Now() - start), traffic.in,
                     traffic.out);
  return ToGrpcStatus(status);
}

absl::Time StateServiceImpl::CallerDeadline(const grpc::ServerContextBase* ctx) {
  auto d = ctx->deadline();
  return d == std::chrono::system_clock::time_point::max() ? absl::InfiniteFuture()
                                                           : absl::FromChrono(d);
}

absl::Time StateServiceImpl::DeadlineOf(const grpc::ServerContextBase* ctx) const {
  return AnswerDeadline(absl::Now(), CallerDeadline(ctx), options_.max_wait);
}

template <typename Request>
absl::StatusOr<std::shared_ptr<Job>> StateServiceImpl::CopyFor(const grpc::ServerContextBase* ctx,
                                                               const Request& req) {
  auto token = TokenOf(*ctx);
  if (!token.ok()) return token.status();
  return CopyForShard(jobs_, primaries_, req.job_id(), *token,
                      req.has_shard() ? std::optional<uint32_t>(req.shard()) : std::nullopt);
}

template <typename Response>
grpc::ServerReadReactor<grpc::ByteBuffer>* StateServiceImpl::ForEachChunk(
    const char* method, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
    std::function<absl::Status(ChunkStream&, const ChunkView&, bool, Response&)> apply) {
  struct Stream {
    absl::Time start = absl::Now();
    Traffic traffic;
    Response resp;
    ChunkStream chunks;
  };
  auto stream = std::make_shared<Stream>();
  auto slot = streams_.Take();
  if (!slot.ok()) return new RefusedReader(Record(method, stream->start, {}, slot.status()));
  stream->chunks.token = TokenOf(*ctx);
  auto each = [stream, apply = std::move(apply)](const ChunkView& chunk, bool may_wait) {
    // A chunk tried first without waiting comes again with may_wait.
    if (!may_wait) stream->traffic.in += chunk.data_bytes;
    return apply(stream->chunks, chunk, may_wait, stream->resp);
  };
  auto done = [this, method, stream, response](const absl::Status& status) {
    stream->resp.set_incarnation(incarnation_);
    bool own_buffer;
    grpc::Status s =
        grpc::SerializationTraits<Response>::Serialize(stream->resp, response, &own_buffer);
    return Record(method, stream->start, stream->traffic,
                  s.ok() ? status : absl::InternalError(s.error_message()));
  };
  return ChunkReader::Start(std::move(each), std::move(done), waits_, *std::move(slot));
}

void StateServiceImpl::PublishUsage() {
  metrics_.SetRam(jobs_.ram_used(), jobs_.ram_budget(), jobs_.size());
  struct statvfs fs;
  if (!options_.nvme_dir.empty() && statvfs(options_.nvme_dir.c_str(), &fs) == 0) {
    uint64_t capacity = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
    metrics_.SetDisk(capacity - static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize, capacity);
  }
}

grpc::Status StateServiceImpl::RegisterJob(grpc::ServerContext* ctx,
                                           const v1::RegisterJobRequest* req,
                                           v1::RegisterJobResponse* resp) {
  return Serve("RegisterJob", [&](Traffic& t) -> absl::Status {
    t.in = req->ByteSizeLong();
    auto token = TokenOf(*ctx);
    if (!token.ok()) return token.status();
    auto reg = jobs_.Register(*req, *token);
    if (!reg.ok()) return reg.status();
    *resp->mutable_info() = JobInfoOf(*reg->job);
    resp->set_created(reg->created);
    resp->set_token(reg->token);
    resp->set_incarnation(incarnation_);
    resp->set_data_port(options_.data_port);
    // The compressed wire is known here (a server that predates it sends none).
    resp->add_wire_formats(v1::WIRE_PLAIN);
    resp->add_wire_formats(v1::WIRE_INT8);
    metrics_.SetJob(reg->job->spec().job_id(), resp->info().state_bytes(), resp->info().version(),
                    StateLayoutOf(reg->job->spec()));
    PublishUsage();
    return absl::OkStatus();
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* StateServiceImpl::InitWeights(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  return ForEachChunk<v1::InitWeightsResponse>(
      "InitWeights", ctx, response,
      [this](ChunkStream& stream, const ChunkView& chunk, bool,
             v1::InitWeightsResponse& resp) -> absl::Status {
        if (!stream.token.ok()) return stream.token.status();
        // InitWeights writes every copy of the job (not served as primary).
        auto job = pushes_.JobFor(chunk.fields.job_id, *stream.token, chunk.fields.block,
                                  /*serve=*/false, &stream.job);
        if (!job.ok()) return job.status();
        if (auto s = (*job)->pushes().InitWeights(chunk); !s.ok()) return s;
        resp.set_chunks_applied(resp.chunks_applied() + 1);
        return absl::OkStatus();
      });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* StateServiceImpl::PushGradients(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  return ForEachChunk<v1::PushResponse>(
      "PushGradients", ctx, response,
      [this, ctx](ChunkStream& stream, const ChunkView& chunk, bool may_wait,
                  v1::PushResponse& resp) -> absl::Status {
        if (!stream.token.ok()) return stream.token.status();
        auto push = pushes_.Begin(chunk.fields, *stream.token, chunk.data_bytes,
                                  CallerDeadline(ctx), PushHandler::Payload::kReceived,
                                  &stream.job);
        if (!push.ok()) return push.status();
        auto outcome = pushes_.Apply(*push, chunk, may_wait);
        if (!outcome.ok()) return outcome.status();
        if (*outcome == PushOutcome::kApplied) {
          resp.set_chunks_applied(resp.chunks_applied() + 1);
        } else {
          resp.set_chunks_duplicate(resp.chunks_duplicate() + 1);
        }
        return absl::OkStatus();
      });
}

grpc::Status StateServiceImpl::GradStats(grpc::ServerContext* ctx, const v1::GradStatsRequest* req,
                                         v1::GradStatsResponse* resp) {
  return Serve("GradStats", [&](Traffic&) -> absl::Status {
    auto job = CopyFor(ctx, *req);
    if (!job.ok()) return job.status();
    StepPhaseTimes times;
    auto stats = (*job)->step().Stats(req->step(), DeadlineOf(ctx), &times, &pool_);
    if (!stats.ok()) return stats.status();
    metrics_.RecordStepPhases(req->job_id(), times);
    resp->set_sum_squares(stats->sum_squares);
    resp->set_nonfinite_count(stats->nonfinite);
    resp->set_incarnation(incarnation_);
    return absl::OkStatus();
  });
}

grpc::Status StateServiceImpl::Step(grpc::ServerContext* ctx, const v1::StepRequest* req,
                                    v1::StepResponse* resp) {
  return Serve("Step", [&](Traffic&) -> absl::Status {
    auto job = CopyFor(ctx, *req);
    if (!job.ok()) return job.status();
    absl::Time start = absl::Now();
    StepReplicator* replicate = nullptr;
    if (replicator_ != nullptr && (*job)->spec().replicas() > 0) {
      auto token = TokenOf(*ctx);
      auto own = jobs_.Authorize(req->job_id(), *token);
      if (!own.ok()) return own.status();
      replicate = (*job)->step().ReplicatorOrMake(
          [&] { return replicator_->For(**job, (*own)->shard_index(), *token); });
    }
    auto out = (*job)->step().Step(
        *req, DeadlineOf(ctx), req->ahead() ? speculation_pool_ : pool_,
        [ctx] { return ctx->IsCancelled(); }, replicate);
    if (!out.ok()) return out.status();
    if (!out->already_applied && !req->ahead()) {
      PublishUsage();
      metrics_.RecordSpeculation(req->job_id(), out->blocks_confirmed, out->blocks_redone);
      metrics_.RecordStep(req->job_id(), absl::ToDoubleSeconds(absl::Now() - start),
                          out->params_stepped, req->skip(), out->version);
      metrics_.RecordStepPhases(req->job_id(), out->times);
    }
    resp->set_version(out->version);
    resp->set_already_applied(out->already_applied);
    resp->set_incarnation(incarnation_);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* StateServiceImpl::Gather(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  const absl::Time start = absl::Now();
  auto slot = streams_.Take();
  if (!slot.ok()) return new RefusedWriter(Record("Gather", start, {}, slot.status()));
  auto req = std::make_shared<v1::GatherRequest>();
  grpc::ByteBuffer copy(*request);  // Deserialize consumes its buffer
  const bool parsed = grpc::SerializationTraits<v1::GatherRequest>::Deserialize(&copy, req.get()).ok();
  auto produce = [this, ctx, req, parsed](GatherSink& sink) -> absl::Status {
    if (!parsed) return absl::InvalidArgumentError("malformed GatherRequest");
    auto token = TokenOf(*ctx);
    if (!token.ok()) return token.status();
    auto gather = gathers_.Begin(*req, *token, CallerDeadline(ctx));
    if (!gather.ok()) return gather.status();
    return gathers_.Serve(*gather, sink);
  };
  auto done = [this, start](const absl::Status& status, uint64_t bytes) {
    return Record("Gather", start, Traffic{0, bytes}, status);
  };
  return GatherWriter::Start(req->job_id(), std::move(produce), std::move(done), waits_,
                             *std::move(slot));
}

absl::Status StateServiceImpl::Locate(const grpc::ServerContextBase* ctx,
                                      const v1::JobStatusRequest& req,
                                      v1::JobStatusResponse* resp) {
  auto token = TokenOf(*ctx);
  if (!token.ok()) return token.status();
  auto job = jobs_.Authorize(req.job_id(), *token);
  if (!job.ok()) return job.status();
  if (primaries_ == nullptr) {
    for (const std::string& name : (*job)->servers()) resp->add_server_addresses(name);
    return absl::OkStatus();
  }
  auto located = primaries_->Locate((*job)->servers());
  if (!located.ok()) return located.status();
  for (std::string& dial : *located) resp->add_server_addresses(std::move(dial));
  return absl::OkStatus();
}

grpc::Status StateServiceImpl::JobStatus(grpc::ServerContext* ctx, const v1::JobStatusRequest* req,
                                         v1::JobStatusResponse* resp) {
  return Serve("JobStatus", [&](Traffic&) -> absl::Status {
    if (req->locate()) return Locate(ctx, *req, resp);
    auto job = CopyFor(ctx, *req);
    if (!job.ok()) return job.status();
    FillJobStatus(**job, resp);
    if (req->trainer_state_version() > 0) {
      auto state = (*job)->step().trainer_states().Find(req->trainer_state_version());
      if (state.has_value()) resp->set_trainer_state(*std::move(state));
    }
    resp->set_incarnation(incarnation_);
    resp->set_data_port(options_.data_port);
    return absl::OkStatus();
  });
}

grpc::Status StateServiceImpl::DeleteJob(grpc::ServerContext* ctx,
                                         const v1::DeleteJobRequest* req,
                                         v1::DeleteJobResponse* resp) {
  return Serve("DeleteJob", [&](Traffic&) -> absl::Status {
    auto token = TokenOf(*ctx);
    if (!token.ok()) return token.status();
    auto deleted = jobs_.Delete(req->job_id(), *token);
    if (!deleted.ok()) return deleted.status();
    if (*deleted) {
      metrics_.ForgetJob(req->job_id());
      if (replicator_ != nullptr) replicator_->Forget(req->job_id());
      // The job is gone either way; a claim left behind goes with the lease.
      if (primaries_ != nullptr) {
        if (absl::Status s = primaries_->Release(req->job_id()); !s.ok()) {
          std::cerr << "zerostate-server: warning: job '" << req->job_id()
                    << "' deleted, but a claim stays until this server's lease ends: " << s
                    << std::endl;
        }
      }
    }
    resp->set_deleted(*deleted);
    resp->set_incarnation(incarnation_);
    PublishUsage();
    return absl::OkStatus();
  });
}

grpc::Status StateServiceImpl::Checkpoint(grpc::ServerContext* ctx,
                                          const v1::CheckpointRequest* req,
                                          v1::CheckpointResponse* resp) {
  return Serve("Checkpoint", [&](Traffic& t) -> absl::Status {
    auto job = CopyFor(ctx, *req);
    if (!job.ok()) return job.status();
    auto written = WriteCheckpoint(**job, req->version(), req->root(), DeadlineOf(ctx));
    if (!written.ok()) return written.status();
    t.out = written->bytes;
    resp->set_version(req->version());
    resp->set_bytes_written(written->bytes);
    resp->set_path(written->dir);
    resp->set_incarnation(incarnation_);
    return absl::OkStatus();
  });
}

grpc::Status StateServiceImpl::Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                                       v1::RestoreResponse* resp) {
  return Serve("Restore", [&](Traffic&) -> absl::Status {
    auto token = TokenOf(*ctx);
    if (!token.ok()) return token.status();
    auto reg = jobs_.Restore(*req, *token);
    if (!reg.ok()) return reg.status();
    *resp->mutable_info() = JobInfoOf(*reg->job);
    resp->set_token(reg->token);
    resp->set_incarnation(incarnation_);
    metrics_.SetJob(reg->job->spec().job_id(), resp->info().state_bytes(), resp->info().version(),
                    StateLayoutOf(reg->job->spec()));
    PublishUsage();
    return absl::OkStatus();
  });
}

grpc::Status StateServiceImpl::Rendezvous(grpc::ServerContext* ctx,
                                          const v1::RendezvousRequest* req,
                                          v1::RendezvousResponse* resp) {
  return Serve("Rendezvous", [&](Traffic&) -> absl::Status {
    // Scoped by the caller's token: only holders of the same token meet,
    // whether or not a job of that token is registered yet; a token with a
    // job here has a larger quota of keys (server/core/rendezvous.h).
    auto token = TokenOf(*ctx);
    if (!token.ok()) return token.status();
    if (token->empty()) {
      return absl::UnauthenticatedError(absl::StrCat(
          "Rendezvous needs the job's token (metadata '", kJobTokenMetadata, "')"));
    }
    RendezvousOwner owner{absl::BytesToHexString(HashToken(*token)), jobs_.HoldsJob(*token)};
    auto values = rendezvous_.Join(owner, req->job_id(), req->key(), req->rank(), req->world(),
                                   req->value(), DeadlineOf(ctx));
    if (!values.ok()) return values.status();
    for (auto& v : *values) resp->add_values(std::move(v));
    resp->set_incarnation(incarnation_);
    return absl::OkStatus();
  });
}

}  // namespace zerostate::server
