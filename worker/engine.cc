#include "worker/engine.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "worker/buckets.h"
#include "worker/lr_schedule.h"

namespace zerostate::worker {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPush:
      return "push";
    case Phase::kStep:
      return "step";
    case Phase::kGather:
      return "gather";
    case Phase::kCheckpoint:
      return "checkpoint";
  }
  return "?";
}

Engine::Engine(client::JobClient* job, Backend* backend, const v1::TrainConfig& train,
               Topology topo, std::vector<uint64_t> ready_points)
    : job_(job),
      backend_(backend),
      train_(train),
      topo_(topo),
      scaler_(train.loss_scaling(), train.precision() == v1::PRECISION_FP16) {
  uint64_t staging = 0;
  for (Range elems : BackwardBuckets(job->layout(), std::move(ready_points))) {
    Range share = LocalShare(elems, topo.local_size, topo.local_rank);
    buckets_.push_back(Bucket{elems, share, staging});
    staging += share.size();
  }
  staging_elems_ = staging;
}

absl::Status Engine::EnsureStaging() {
  if (push_staging_ != nullptr) return absl::OkStatus();
  auto push = backend_->AllocHost(staging_elems_);
  if (!push.ok()) return push.status();
  auto gather = backend_->AllocHost(staging_elems_);
  if (!gather.ok()) return gather.status();
  push_staging_ = *std::move(push);
  gather_staging_ = *std::move(gather);
  return absl::OkStatus();
}

void Engine::OnReady(uint64_t step, uint64_t ready_begin) {
  if (!pushing_) {
    pushing_ = true;
    if (hook_) hook_(Phase::kPush, step);
  }
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].elems.begin >= ready_begin) {
    const Bucket& b = buckets_[next_bucket_++];
    if (!push_error_.ok()) continue;  // keep the collective going; report later
    auto t0 = Clock::now();
    float* out = push_staging_.get() + b.staging;
    push_error_ = backend_->ReduceScatter(b.elems, out);
    exchange_seconds_ += Since(t0);
    if (push_error_.ok() && !b.share.empty()) {
      push_tickets_.push_back(job_->PushAsync(step, topo_.node, b.share, out, v1::DTYPE_FP32));
    }
  }
}

absl::Status Engine::PushRemaining(uint64_t step) {
  OnReady(step, 0);  // buckets the model did not report (none for the MLP)
  absl::Status status = push_error_;
  for (const client::Ticket& t : push_tickets_) {
    absl::Status s = t.Wait();
    if (status.ok() && !s.ok()) status = s;
  }
  return status;
}

std::vector<client::Ticket> Engine::StartGather(uint64_t version) {
  std::vector<client::Ticket> tickets;
  for (const Bucket& b : buckets_) {
    if (b.share.empty()) continue;
    tickets.push_back(
        job_->GatherAsync(version, b.share, gather_staging_.get() + b.staging, v1::DTYPE_FP32));
  }
  return tickets;
}

absl::Status Engine::FinishGather(std::vector<client::Ticket>& tickets, PhaseTimes* times) {
  auto t0 = Clock::now();
  absl::Status status;
  for (const client::Ticket& t : tickets) {
    absl::Status s = t.Wait();
    if (status.ok() && !s.ok()) status = s;
  }
  times->gather += Since(t0);
  // Every rank must take part in the all-gathers even after an error, or
  // its peers would wait forever at the barrier; the error is kept.
  t0 = Clock::now();
  for (const Bucket& b : buckets_) {
    absl::Status s = backend_->AllGather(b.elems, gather_staging_.get() + b.staging);
    if (status.ok() && !s.ok()) status = s;
  }
  times->exchange += Since(t0);
  return status;
}

absl::Status Engine::LoadWeights(uint64_t version) {
  if (auto s = EnsureStaging(); !s.ok()) return s;
  auto tickets = StartGather(version);
  PhaseTimes ignored;
  return FinishGather(tickets, &ignored);
}

void Engine::SetJob(client::JobClient* job) { job_ = job; }

void Engine::SaveScaler(uint64_t step) {
  saved_scalers_.insert_or_assign(step, scaler_);
  while (saved_scalers_.size() > 4) saved_scalers_.erase(saved_scalers_.begin());
}

bool Engine::RestoreScaler(uint64_t step) {
  auto it = saved_scalers_.find(step);
  if (it == saved_scalers_.end()) return false;
  scaler_ = it->second;
  return true;
}

absl::StatusOr<TrainerState> Engine::CoordinatorScaler(uint64_t version) {
  auto text = job_->TrainerState(version);
  if (!text.ok()) return text.status();
  return DecodeTrainerState(*text);
}

absl::Status Engine::ResumeScaler(uint64_t version) {
  if (train_.precision() != v1::PRECISION_FP16 || version == 0) return absl::OkStatus();
  auto state = CoordinatorScaler(version);
  if (!state.ok()) return state.status();
  scaler_.set_state(state->scaler);
  return absl::OkStatus();
}

absl::StatusOr<StepReport> Engine::Step(uint64_t step, const MicroBatchFn& micro_batch) {
  const auto start = Clock::now();
  StepReport report;
  report.step = step;
  report.lr = LearningRate(train_.lr(), step);
  report.loss_scale = scaler_.scale();
  pushing_ = false;
  next_bucket_ = 0;
  push_tickets_.clear();
  push_error_ = absl::OkStatus();
  exchange_seconds_ = 0;
  if (auto s = EnsureStaging(); !s.ok()) return s;
  if (auto s = backend_->ZeroGrads(); !s.ok()) return s;
  const uint32_t micros = train_.grad_accum_steps();
  // Speculative step: the coordinator sends the Step's parameters before
  // the gradients leave, so the servers step each block as it completes.
  // A failure is this step's, taken up after the compute (below), so that
  // the node's collectives still run on every rank.
  absl::Status ahead;
  if (train_.speculative_step() && topo_.rank() == 0) {
    ahead = job_->StepAhead(step, report.lr,
                            UnclippedGradScale(scaler_.scale(), double{topo_.world()} * micros));
  }
  GradsReadyFn ready = [&](uint64_t begin) { OnReady(step, begin); };
  for (uint32_t m = 0; m < micros; ++m) {
    auto loss = micro_batch(m, scaler_.scale(), m + 1 == micros ? ready : GradsReadyFn());
    if (!loss.ok()) return loss.status();
    report.loss += *loss / static_cast<float>(micros);
  }
  report.times.compute = Since(start) - exchange_seconds_;
  report.times.exchange = exchange_seconds_;
  // From here on a failure is kept in `status` and the rank still goes
  // through the step's rendezvous and all-gathers (see engine.h).
  auto t0 = Clock::now();
  absl::Status status = PushRemaining(step);  // waits for every push
  if (status.ok()) status = ahead;
  report.times.push = Since(t0);

  t0 = Clock::now();
  if (hook_) hook_(Phase::kStep, step);
  StepDecision decision;
  if (topo_.rank() == 0 && status.ok()) {
    auto stats = job_->GradStats(step);
    if (stats.ok()) {
      decision =
          DecideStep(stats->sum_squares, stats->nonfinite_count, scaler_.scale(),
                     double{topo_.world()} * train_.grad_accum_steps(), train_.gradient_clipping());
      report.grad_norm = decision.grad_norm;
    } else {
      status = stats.status();
    }
  }
  const bool fp16 = train_.precision() == v1::PRECISION_FP16;
  LossScaler next = scaler_;  // the scaler after this step
  // Every rank's gathers go out before the coordinator's Step returns, so
  // the servers answer each block as soon as their pass has stepped it and
  // the gather overlaps the pass. Gathers run on the client's gather pool,
  // the Step on threads of its own: neither waits for the other.
  std::vector<client::Ticket> gather;
  if (status.ok()) gather = StartGather(step + 1);
  if (topo_.rank() == 0 && status.ok()) {
    next.Update(decision.skip);
    // The servers keep the coordinator's decision; the other ranks read it
    // below, and a resuming run at its start (ResumeScaler).
    std::string state = fp16 ? EncodeTrainerState({next.state(), decision.skip}) : "";
    status = job_->Step(step, report.lr, decision.grad_scale, decision.skip, state);
  }
  // The gathers are out and, on the coordinator, the Step is done.
  if (hook_) hook_(Phase::kGather, step);
  // No Step brings step+1 now: the coordinator makes the waits on it end
  // (its own gathers' too) before it waits in the node's collectives.
  if (!status.ok() && topo_.rank() == 0 && failure_hook_) failure_hook_(status);
  report.times.step = Since(t0);
  absl::Status gathered = FinishGather(gather, &report.times);  // all-gathers even after an error
  if (status.ok()) status = gathered;
  // Version step+1 exists now, and with it the coordinator's scaler state.
  if (fp16 && topo_.rank() != 0 && status.ok()) {
    auto followed = CoordinatorScaler(step + 1);
    if (followed.ok()) {
      next.set_state(followed->scaler);
      decision.skip = followed->skipped;
    } else {
      status = followed.status();
    }
  }
  report.skipped = decision.skip;
  // The node's ranks agree on the outcome, so they roll back (or go on) together.
  auto any_failed = backend_->NodeAnyFailed(!status.ok());
  if (!any_failed.ok()) return any_failed.status();
  if (status.ok() && *any_failed) {
    status = absl::AbortedError(
        absl::StrCat("step ", step, " failed on another rank of node ", topo_.node));
  }
  if (!status.ok()) return status;
  scaler_ = next;
  report.seconds = Since(start);
  return report;
}

}  // namespace zerostate::worker
