// The gRPC edge of the state server: each handler decodes the request,
// hands it to the core (the push and gather handlers the data plane calls
// too, server/core/push_handler.h and gather_handler.h; the JobRegistry,
// Job, Rendezvous), converts the answer to a grpc::Status and records
// metrics. No math, no I/O, no contended lock here.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/time/time.h"
#include "server/core/gather_handler.h"
#include "server/core/job_registry.h"
#include "server/core/metrics.h"
#include "server/core/push_handler.h"
#include "server/core/rendezvous.h"
#include "server/core/primaries.h"
#include "server/replication/replicator.h"
#include "server/core/thread_pool.h"
#include "server/rpc/chunk_reactors.h"
#include "server/rpc/stream_cap.h"
#include "server/rpc/wait_pool.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::server {

struct ServiceOptions {
  // Upper bound on any wait (gather, stats, step, rendezvous) when the
  // caller set no deadline.
  absl::Duration max_wait = absl::Minutes(10);
  // The NVMe tier's directory, whose filesystem's usage the metrics report
  // ("" when the server has no NVMe tier).
  std::string nvme_dir;
  // Elements per gathered chunk message.
  uint32_t gather_piece_elems = 256 * 1024;
  // The data plane's port, advertised in RegisterJob and JobStatus
  // answers (0: none).
  uint32_t data_port = 0;
  // Chunk streams (InitWeights, PushGradients, Gather) served at once
  // (--max_grpc_streams, >= 1); one more is answered RESOURCE_EXHAUSTED
  // (stream_cap.h). Also the most threads that wait for them (WaitPool).
  int max_streams = 1024;
};

// The chunk streams (InitWeights, PushGradients, Gather) run on gRPC's
// callback API with raw ByteBuffer messages (chunk_reactors.h); the other
// methods are synchronous.
using StateServiceBase = v1::StateService::WithRawCallbackMethod_InitWeights<
    v1::StateService::WithRawCallbackMethod_PushGradients<
        v1::StateService::WithRawCallbackMethod_Gather<v1::StateService::Service>>>;

class StateServiceImpl final : public StateServiceBase {
 public:
  // All references must outlive the service. `pushes` and `gathers` are
  // the core's handlers, shared with the data plane. `primaries` and
  // `replicator` (server/replication/) serve the shards of jobs with
  // backups; null: only own shards, steps not replicated.
  StateServiceImpl(ServiceOptions options, JobRegistry& jobs, const PushHandler& pushes,
                   const GatherHandler& gathers, RendezvousTable& rendezvous, ThreadPool& pool,
                   ThreadPool& speculation_pool, ServerMetrics& metrics, uint64_t incarnation, Primaries* primaries = nullptr,
                   Replicator* replicator = nullptr);

  grpc::Status RegisterJob(grpc::ServerContext* ctx, const v1::RegisterJobRequest* req,
                           v1::RegisterJobResponse* resp) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* InitWeights(grpc::CallbackServerContext* ctx,
                                                         grpc::ByteBuffer* resp) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushGradients(grpc::CallbackServerContext* ctx,
                                                           grpc::ByteBuffer* resp) override;
  grpc::Status GradStats(grpc::ServerContext* ctx, const v1::GradStatsRequest* req,
                         v1::GradStatsResponse* resp) override;
  grpc::Status Step(grpc::ServerContext* ctx, const v1::StepRequest* req,
                    v1::StepResponse* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Gather(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* req) override;
  grpc::Status JobStatus(grpc::ServerContext* ctx, const v1::JobStatusRequest* req,
                         v1::JobStatusResponse* resp) override;
  grpc::Status DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override;
  grpc::Status Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                          v1::CheckpointResponse* resp) override;
  grpc::Status Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                       v1::RestoreResponse* resp) override;
  // Sets the RAM and disk usage gauges; called after anything that
  // changes them, and once at start.
  void PublishUsage();

  grpc::Status Rendezvous(grpc::ServerContext* ctx, const v1::RendezvousRequest* req,
                          v1::RendezvousResponse* resp) override;

 private:
  // Payload bytes of one call, for the byte counters.
  struct Traffic {
    uint64_t in = 0;
    uint64_t out = 0;
  };
  // Runs `body`, records latency, traffic and the answer under `method`.
  template <typename Body>
  grpc::Status Serve(const char* method, Body&& body);
  // Records a call that began at `start` and returns its status.
  grpc::Status Record(const char* method, absl::Time start, const Traffic& traffic,
                      const absl::Status& status);
  // When the caller gives up: the call's deadline (none: never).
  static absl::Time CallerDeadline(const grpc::ServerContextBase* ctx);
  // How long the call may wait: AnswerDeadline of its deadline (a margin
  // before it; answer_deadline.h), at most options_.max_wait.
  absl::Time DeadlineOf(const grpc::ServerContextBase* ctx) const;
  // JobStatus with `locate`: where the job's servers are dialled now
  // (Primaries::Locate; their names without a membership), for any server
  // holding the job. Errors: as JobRegistry::Authorize; the membership's.
  [[nodiscard]] absl::Status Locate(const grpc::ServerContextBase* ctx,
                                    const v1::JobStatusRequest& req,
                                    v1::JobStatusResponse* resp);
  // The copy of the shard a request names (its optional `shard`; unset:
  // the own shard), checked as a primary (server/core/routing.h).
  template <typename Request>
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> CopyFor(const grpc::ServerContextBase* ctx,
                                                             const Request& req);
  // What a chunk stream knows of itself: the token its call carries (read
  // once), and the copy of the job its last chunk named (authorized once
  // per copy).
  struct ChunkStream {
    absl::StatusOr<std::string> token;
    std::shared_ptr<Job> job;
  };
  // A reader of a chunk stream (a StreamCap slot taken; else a refusal)
  // that applies each chunk with apply(stream, chunk, may_wait, resp)
  // (ChunkReader::Apply's may_wait), stops at the first error, and answers
  // `resp` (incarnation set) in `response`. Response is PushResponse or
  // InitWeightsResponse.
  template <typename Response>
  grpc::ServerReadReactor<grpc::ByteBuffer>* ForEachChunk(
      const char* method, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
      std::function<absl::Status(ChunkStream&, const ChunkView&, bool, Response&)> apply);

  const ServiceOptions options_;
  JobRegistry& jobs_;
  const PushHandler& pushes_;
  const GatherHandler& gathers_;
  RendezvousTable& rendezvous_;
  ThreadPool& pool_;
  ThreadPool& speculation_pool_;  // Steps sent ahead (speculative jobs) step blocks on it
  ServerMetrics& metrics_;
  const uint64_t incarnation_;
  Primaries* const primaries_;
  Replicator* const replicator_;
  StreamCap streams_;
  WaitPool waits_;  // last: its threads end before the rest is destroyed
};

}  // namespace zerostate::server
