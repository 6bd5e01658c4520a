// JobClient: argument checks, then the fan-out of each call over servers
// and streams on the client's pool.
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/data_streams.h"
#include "client/job_client_impl.h"
#include "client/validate.h"
#include "common/job_spec.h"
#include "common/shard_map.h"

namespace zerostate::client {

JobClient::Impl::Impl(std::shared_ptr<Client::Impl> client, v1::JobSpec spec,
                      std::vector<uint64_t> incarnations,
                      const std::vector<uint32_t>& data_ports)
    : client_(std::move(client)),
      spec_(std::move(spec)),
      layout_(LayoutOf(spec_)),
      budget_(client_->options().max_bytes_in_flight),
      job_{client_.get(),
           spec_.job_id(),
           layout_.block_elems,
           std::make_shared<ServerIncarnations>(incarnations),
           &budget_,
           std::make_shared<DataPlanes>(
               DataPools(client_->options(), client_->addresses(), data_ports, incarnations,
                         client_->cutters())),
           std::make_shared<ShardRoutes>(client_->num_servers()),
           spec_.replicas() > 0 ? std::optional<absl::Duration>(
                                      absl::FromChrono(client_->options().failover_wait))
                                : std::nullopt,
           &tally_,
           &pushes_held_},
      feedback_(layout_.block_elems),
      calls_(std::make_shared<Ticket::State>(1)) {}

JobClient::Impl::~Impl() {
  calls_->Done(absl::OkStatus());
  (void)calls_->Wait();
}

std::shared_ptr<Ticket::State> JobClient::Impl::BeginCall(int parts) {
  calls_->Add(1);
  return std::make_shared<Ticket::State>(
      parts, [calls = calls_] { calls->Done(absl::OkStatus()); });
}

std::vector<StreamPlan> JobClient::Impl::Plans(Range elems, v1::DType wire) const {
  const ClientOptions& o = client_->options();
  uint32_t chunk = ChunkElems(o.chunk_bytes, DTypeSize(wire), layout_.block_elems);
  return PlanStreams(layout_, client_->num_servers(), elems, o.streams_per_server, chunk);
}

std::vector<StreamPlan> JobClient::Impl::GatherPlans(Range elems, v1::DType wire) const {
  if (!client_->gathers_in_place()) return Plans(elems, wire);
  return PlanStreams(layout_, client_->num_servers(), elems,
                     client_->options().streams_per_server,
                     uint64_t{kSameHostGatherStreamBlocks} * layout_.block_elems);
}

template <class RunStream>
Ticket JobClient::Impl::StartStreams(ThreadPool& pool, std::vector<StreamPlan> plans,
                                     RunStream run) {
  if (plans.empty()) return CompletedTicket(absl::OkStatus());
  std::shared_ptr<Ticket::State> ticket = BeginCall(static_cast<int>(plans.size()));
  for (const StreamPlan& plan : plans) {
    pool.Schedule([run, plan, ticket] { ticket->Done(run(plan, ticket)); });
  }
  return Ticket(std::move(ticket));
}

Ticket JobClient::Impl::StartPush(const PushCall& call) {
  return StartStreams(client_->pool(), Plans(call.elems, PlanWire(call)),
                      [this, call](const StreamPlan& plan, const auto& ticket) {
                        return OnShard(plan.shard, [&](int) {
                          return RunPushStream(job_, call, plan, ticket);
                        });
                      });
}

Ticket JobClient::Impl::StartGather(const GatherCall& call) {
  return StartStreams(client_->gather_pool(), GatherPlans(call.elems, call.wire),
                      [this, call](const StreamPlan& plan, const auto& ticket) {
    return OnShard(plan.shard,
                   [&](int) { return RunGatherStream(job_, call, plan, ticket->cancel()); });
  });
}

Ticket JobClient::Impl::PushAsync(uint64_t step, uint32_t node, Range elems, const void* data,
                                  v1::DType dtype) {
  if (absl::Status s = ValidatePush(spec_, layout_, node, elems, data, dtype); !s.ok()) {
    return CompletedTicket(s);
  }
  PushCall call{Method::kPushGradients, step, node, elems, data, dtype, spec_.grad_dtype(),
                /*int8=*/nullptr};
  if (spec_.gradient_wire() == v1::WIRE_INT8) {
    const uint32_t chunk = ChunkElems(client_->options().chunk_bytes, DTypeSize(v1::DTYPE_INT8),
                                      layout_.block_elems);
    call.int8 = std::make_shared<Int8Push>(&feedback_, node, elems.begin, data, dtype,
                                           layout_.block_elems, chunk,
                                           Plans(elems, v1::DTYPE_INT8));
  }
  Journal(call);
  return StartPush(call);
}

absl::Status JobClient::Impl::InitWeights(Range elems, const float* data) {
  if (absl::Status s = ValidateRange(layout_, elems); !s.ok()) return s;
  if (data == nullptr && !elems.empty()) return absl::InvalidArgumentError("data: null buffer");
  const PushCall call{Method::kInitWeights, 0, 0, elems, data, v1::DTYPE_FP32, v1::DTYPE_FP32,
                      /*int8=*/nullptr};
  if (spec_.replicas() == 0) return StartPush(call).Wait();
  // Every copy of each shard gets the weights: copy r of shard i is on
  // server (i + r) % S (ReplicaServers), whose InitWeights writes it.
  const int servers = client_->num_servers();
  for (uint32_t r = 0; r <= spec_.replicas(); ++r) {
    JobContext copy = job_;
    copy.routes = std::make_shared<ShardRoutes>(servers);
    for (int shard = 0; shard < servers; ++shard) copy.routes->Move(shard, shard, (shard + r) % servers);
    Ticket done = StartStreams(client_->pool(), Plans(call.elems, call.wire),
                               [copy, call](const StreamPlan& plan, const auto& ticket) {
                                 return RunPushStream(copy, call, plan, ticket);
                               });
    if (absl::Status s = done.Wait(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

Ticket JobClient::Impl::GatherAsync(uint64_t min_version, Range elems, void* out,
                                    v1::DType dtype, bool master) {
  absl::Status s = master ? ValidateGather(spec_, layout_, elems, out, v1::DTYPE_FP32)
                          : ValidateGather(spec_, layout_, elems, out, dtype);
  if (!s.ok()) return CompletedTicket(s);
  v1::DType wire = master ? v1::DTYPE_FP32 : spec_.weight_dtype();
  return StartGather(GatherCall{min_version, elems, out, wire, dtype,
                                !master && spec_.weight_wire() == v1::WIRE_INT8});
}

absl::StatusOr<GradStatsResult> JobClient::Impl::GradStats(uint64_t step) {
  std::vector<v1::GradStatsResponse> answers(client_->num_servers());
  std::vector<absl::Status> failures(client_->num_servers());
  // The first shard that fails ends the others' calls: a server that lost
  // the job (it restarted) answers at once, while a survivor would wait
  // out the deadline for gradients that the ranks which failed on the lost
  // one never push. The caller then gets the failure, not the cancel.
  CallCancel cancel;
  absl::Status s = client_->ForEachServer([&](int shard) {
    v1::GradStatsRequest req;
    req.set_job_id(spec_.job_id());
    req.set_step(step);
    SetShard(req, shard);
    absl::Status st = OnShard(shard, [&](int server) {
      absl::Status st =
          client_->Unary(Method::kGradStats, server, &v1::StateService::Stub::GradStats, req,
                         &answers[shard], job_.unavailable_wait, &cancel);
      return st.ok() ? CheckIncarnation(job_, server, answers[shard].incarnation()) : st;
    });
    if (!st.ok() && !absl::IsCancelled(st)) {
      failures[shard] = st;
      cancel.Cancel(absl::StrCat("GradStats of step ", step, ": another shard failed"));
    }
    return st;
  });
  for (const absl::Status& f : failures) {
    if (!f.ok()) return f;
  }
  if (!s.ok()) return s;
  GradStatsResult total;
  for (const v1::GradStatsResponse& a : answers) {  // shard order: deterministic sum
    total.sum_squares += a.sum_squares();
    total.nonfinite_count += a.nonfinite_count();
  }
  return total;
}

absl::Status JobClient::Impl::Step(uint64_t step, float lr, float grad_scale, bool skip,
                                   const std::string& trainer_state) {
  if (trainer_state.size() > JobClient::kMaxTrainerStateBytes) {
    return absl::InvalidArgumentError(absl::StrCat("trainer_state: ", trainer_state.size(),
                                                   " bytes exceed ",
                                                   JobClient::kMaxTrainerStateBytes));
  }
  v1::StepRequest req;
  req.set_job_id(spec_.job_id());
  req.set_step(step);
  req.set_lr(lr);
  req.set_grad_scale(grad_scale);
  req.set_skip(skip);
  req.set_trainer_state(trainer_state);
  return SendStep(req);
}

absl::Status JobClient::Impl::StepAhead(uint64_t step, float lr, float grad_scale) {
  v1::StepRequest req;
  req.set_job_id(spec_.job_id());
  req.set_step(step);
  req.set_lr(lr);
  req.set_grad_scale(grad_scale);
  req.set_ahead(true);
  return SendStep(req);
}

absl::Status JobClient::Impl::SendStep(const v1::StepRequest& req) {
  return client_->ForEachServer([&](int shard) {
    v1::StepRequest at = req;
    SetShard(at, shard);
    return OnShard(shard, [&](int server) {
      v1::StepResponse resp;
      absl::Status st = client_->Unary(Method::kStep, server, &v1::StateService::Stub::Step, at,
                                       &resp, job_.unavailable_wait);
      return st.ok() ? CheckIncarnation(job_, server, resp.incarnation()) : st;
    });
  });
}

absl::StatusOr<std::string> JobClient::Impl::Checkpoint(uint64_t version,
                                                       const std::string& root) {
  if (root.empty() || root[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("root: '", root, "' is not an absolute path"));
  }
  std::vector<std::string> dirs(client_->num_servers());
  absl::Status s = client_->ForEachServer([&](int shard) {
    v1::CheckpointRequest req;
    req.set_job_id(spec_.job_id());
    req.set_version(version);
    req.set_root(root);
    SetShard(req, shard);
    return OnShard(shard, [&](int server) {
      v1::CheckpointResponse resp;
      absl::Status st = client_->Unary(Method::kCheckpoint, server,
                                       &v1::StateService::Stub::Checkpoint, req, &resp,
                                       job_.unavailable_wait);
      dirs[shard] = resp.path();
      return st.ok() ? CheckIncarnation(job_, server, resp.incarnation()) : st;
    });
  });
  if (!s.ok()) return s;
  return dirs[0];
}

absl::Status JobClient::Impl::Delete() {
  return client_->ForEachServer([&](int shard) {
    v1::DeleteJobRequest req;
    req.set_job_id(spec_.job_id());
    v1::DeleteJobResponse resp;
    return client_->Unary(Method::kDeleteJob, shard, &v1::StateService::Stub::DeleteJob, req,
                          &resp);
  });
}

absl::StatusOr<uint64_t> JobClient::Impl::Version() {
  std::vector<uint64_t> versions(client_->num_servers());
  absl::Status s = client_->ForEachServer([&](int shard) {
    v1::JobStatusRequest req;
    req.set_job_id(spec_.job_id());
    SetShard(req, shard);
    return OnShard(shard, [&](int server) {
      v1::JobStatusResponse resp;
      absl::Status st = client_->Unary(Method::kJobStatus, server,
                                       &v1::StateService::Stub::JobStatus, req, &resp,
                                       job_.unavailable_wait);
      versions[shard] = resp.min_version();
      if (absl::IsNotFound(st) || absl::IsUnauthenticated(st)) {
        // This handle attached with this token: the server no longer has the
        // job (it restarted, or the job was deleted there).
        return absl::AbortedError(absl::StrCat(
            "server ", client_->server(server).address(), " no longer holds job ",
            spec_.job_id(), " (it restarted and lost its shard, or the job was deleted there)"));
      }
      return st.ok() ? CheckIncarnation(job_, server, resp.incarnation()) : st;
    });
  });
  if (!s.ok()) return s;
  return AgreedVersion(*client_, layout_, spec_.job_id(), versions);
}

absl::StatusOr<std::string> JobClient::Impl::TrainerState(uint64_t version) {
  if (version == 0) {
    return absl::InvalidArgumentError("version: 0 has no trainer state (no step made it)");
  }
  // One server after the other: the first usually keeps it.
  for (int shard = 0; shard < client_->num_servers(); ++shard) {
    v1::JobStatusRequest req;
    req.set_job_id(spec_.job_id());
    req.set_trainer_state_version(version);
    SetShard(req, shard);
    v1::JobStatusResponse resp;
    absl::Status st = OnShard(shard, [&](int server) {
      absl::Status at = client_->Unary(Method::kJobStatus, server,
                                       &v1::StateService::Stub::JobStatus, req, &resp,
                                       job_.unavailable_wait);
      return at.ok() ? CheckIncarnation(job_, server, resp.incarnation()) : at;
    });
    if (!st.ok()) return st;
    if (!resp.trainer_state().empty()) return resp.trainer_state();
  }
  return absl::NotFoundError(absl::StrCat("job '", spec_.job_id(), "': no server keeps a trainer ",
                                          "state for version ", version,
                                          " (each keeps the newest 4 its steps carried)"));
}

// The public JobClient forwards to its Impl.
JobClient::JobClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobClient::~JobClient() = default;
const v1::JobSpec& JobClient::spec() const { return impl_->spec(); }
const Layout& JobClient::layout() const { return impl_->layout(); }
std::string JobClient::token() const { return impl_->token(); }

absl::StatusOr<Range> JobClient::TensorRange(const std::string& name) const {
  for (const TensorSlot& t : impl_->layout().tensors) {
    if (t.name == name) return Range{t.offset, t.offset + t.numel};
  }
  return absl::NotFoundError(
      absl::StrCat("tensor: '", name, "' is not in job '", impl_->spec().job_id(), "'"));
}

Ticket JobClient::PushAsync(uint64_t step, uint32_t node, Range elems, const void* data,
                            v1::DType dtype) {
  return impl_->PushAsync(step, node, elems, data, dtype);
}

absl::Status JobClient::Push(uint64_t step, uint32_t node, Range elems, const void* data,
                             v1::DType dtype) {
  return impl_->PushAsync(step, node, elems, data, dtype).Wait();
}

absl::StatusOr<GradStatsResult> JobClient::GradStats(uint64_t step) {
  return impl_->GradStats(step);
}

WireStats JobClient::wire_stats() const { return impl_->wire_stats(); }

void JobClient::SetPushesHeld(bool held) { impl_->SetPushesHeld(held); }

absl::Status JobClient::Step(uint64_t step, float lr, float grad_scale, bool skip,
                             const std::string& trainer_state) {
  return impl_->Step(step, lr, grad_scale, skip, trainer_state);
}

absl::Status JobClient::StepAhead(uint64_t step, float lr, float grad_scale) {
  return impl_->StepAhead(step, lr, grad_scale);
}

absl::StatusOr<std::string> JobClient::TrainerState(uint64_t version) {
  return impl_->TrainerState(version);
}

Ticket JobClient::GatherAsync(uint64_t min_version, Range elems, void* out, v1::DType dtype) {
  return impl_->GatherAsync(min_version, elems, out, dtype, /*master=*/false);
}

absl::Status JobClient::Gather(uint64_t min_version, Range elems, void* out, v1::DType dtype) {
  return GatherAsync(min_version, elems, out, dtype).Wait();
}

absl::Status JobClient::GatherMaster(uint64_t min_version, Range elems, float* out) {
  return impl_->GatherAsync(min_version, elems, out, v1::DTYPE_FP32, /*master=*/true).Wait();
}

absl::Status JobClient::InitWeights(Range elems, const float* data) {
  return impl_->InitWeights(elems, data);
}

absl::StatusOr<uint64_t> JobClient::Version() { return impl_->Version(); }

absl::Status JobClient::Delete() { return impl_->Delete(); }

absl::StatusOr<std::string> JobClient::Checkpoint(uint64_t version, const std::string& root) {
  return impl_->Checkpoint(version, root);
}

}  // namespace zerostate::client
