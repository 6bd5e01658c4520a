#include "worker/engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/shared_buffer.h"
#include "common/job_spec.h"
#include "common/timeline.h"
#include "trainer/bucket_plan.h"

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
      policy_(train) {
  buckets_ = trainer::PlanBuckets(
      job->layout(), std::move(ready_points),
      train.bucket_elems() != 0 ? train.bucket_elems() : trainer::kMaxBucketElems,
      topo.local_size, topo.local_rank);
  if (!buckets_.empty()) staging_elems_ = buckets_.back().staging + buckets_.back().share.size();
  for (const Bucket& b : buckets_) slots_.push_back(std::make_unique<trainer::GatherSlot>(b.share));
  if (topo.local_size == 1) {
    grads_in_place_ = backend_->GradsInPlace();
    if (!train.delayed_update().enabled()) params_in_place_ = backend_->ParamsInPlace();
  }
  // The speculative step too: its parameters go ahead at the first push,
  // once the Step before it has returned (SendAhead).
  layer_landing_ = train.precision() != v1::PRECISION_FP16 && !train.whole_landing() &&
                   backend_->SetWeightsNeeded([this](uint64_t end) { LandBelow(end); });
}

Engine::~Engine() {
  Abandon(absl::OkStatus());
  if (layer_landing_) backend_->SetWeightsNeeded(nullptr);
}

absl::StatusOr<HostBuffer> Engine::AllocStaging() {
  if (staging_client_ != nullptr) {
    auto shared = staging_client_->AllocateShared(std::max<uint64_t>(staging_elems_, 1) * sizeof(float));
    if (shared.ok()) {
      std::shared_ptr<client::SharedBuffer> buffer = *std::move(shared);
      void* data = buffer->data();
      const size_t bytes = buffer->size();
      return backend_->AdoptHost(data, bytes, std::move(buffer));
    }
  }
  return backend_->AllocHost(staging_elems_);
}

absl::Status Engine::EnsureStaging() {
  if (push_staging_ != nullptr) return absl::OkStatus();
  auto push = AllocStaging();
  if (!push.ok()) return push.status();
  auto gather = AllocStaging();
  if (!gather.ok()) return gather.status();
  push_staging_ = *std::move(push);
  gather_staging_ = *std::move(gather);
  return absl::OkStatus();
}

void* Engine::PushStaging(const Bucket& b) const {
  if (grads_in_place_ != nullptr) return grads_in_place_ + b.share.begin;
  return reinterpret_cast<char*>(push_staging_.get()) + b.staging * DTypeSize(backend_->grad_staging());
}

void* Engine::GatherStaging(const Bucket& b) const {
  if (params_in_place_ != nullptr) return params_in_place_ + b.share.begin;
  return reinterpret_cast<char*>(gather_staging_.get()) + b.staging * DTypeSize(backend_->weight_staging());
}

absl::Status Engine::AllGather(const Bucket& b) {
  if (params_in_place_ != nullptr) return absl::OkStatus();  // the gather wrote them
  return backend_->AllGather(b.elems, GatherStaging(b));
}

void Engine::PushBucket(uint64_t step, size_t index) {
  const Bucket& b = buckets_[index];
  if (b.share.empty()) return;
  Timeline::Record("push_bucket", static_cast<int64_t>(index), static_cast<int64_t>(step));
  trainer::PushOrder order;
  order.what = trainer::PushName(step, b.share);
  // Delayed update: the servers take step `step`'s pushes once the
  // bucket's blocks are at version `step`, which its gather (of the same
  // share) shows: the push waits for it on the push thread, as
  // zerostate.torch's does, while the servers still step later blocks.
  if (slots_[index]->pending().has_value()) {
    order.waits.push_back([slot = slots_[index].get(), step] { return slot->WaitGathered(step); });
  }
  order.issue = [job = job_, node = topo_.node, step, share = b.share, data = PushStaging(b),
                 dtype = backend_->grad_staging()] {
    return job->PushAsync(step, node, share, data, dtype);
  };
  pusher_.Submit(std::move(order));
}

void Engine::OnReady(uint64_t step, uint64_t ready_begin) {
  if (!pushing_) {
    pushing_ = true;
    if (hook_) hook_(Phase::kPush, step);
    SendAhead(step);
  }
  // Every bucket ready now is started before the first is waited for, so
  // the backend reduces and copies them back to back; each is pushed as
  // soon as its own reduction is in, while the later ones still run.
  auto t0 = Clock::now();
  std::vector<size_t> started;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].elems.begin >= ready_begin) {
    const size_t index = next_bucket_++;
    const Bucket& b = buckets_[index];
    if (!push_error_.ok()) continue;  // keep the collective going; report later
    if (grads_in_place_ == nullptr) push_error_ = backend_->StartReduceScatter(b.elems, PushStaging(b));
    if (push_error_.ok()) started.push_back(index);
  }
  exchange_seconds_ += Since(t0);
  for (size_t index : started) {
    t0 = Clock::now();
    // Every start is finished.
    absl::Status s = grads_in_place_ != nullptr ? absl::OkStatus() : backend_->FinishReduceScatter();
    exchange_seconds_ += Since(t0);
    if (push_error_.ok()) push_error_ = s;
    if (!push_error_.ok()) continue;
    PushBucket(step, index);
  }
}

void Engine::SendAhead(uint64_t step) {
  if (!train_.speculative_step() || topo_.rank() != 0) return;
  // The servers take the parameters of step `step` once every block is at
  // its version: the Step before it (in flight while this forward landed
  // its layers) has returned first. Its failure fails this step there
  // (LandPending), with nothing sent ahead.
  if (!in_flight_.Join().ok()) return;
  ahead_ = trainer::SendAhead(job_, policy_, step, AverageOver(), std::nullopt);
}

absl::Status Engine::PushRemaining(uint64_t step) {
  OnReady(step, 0);  // buckets the model did not report (none for the MLP)
  absl::Status status = push_error_;
  absl::Status pushed = pusher_.Drain();
  return status.ok() ? pushed : status;
}

absl::Status Engine::StartGather(uint64_t version, bool gather) {
  absl::Status status;
  // Buckets are in backward order: the first layer's goes out first.
  for (size_t i = buckets_.size(); i-- > 0;) {
    const Bucket& b = buckets_[i];
    trainer::GatherSlot::IssueFn issue;
    if (gather && !b.share.empty()) {
      issue = [this, version, &b] {
        return job_->GatherAsync(version, b.share, GatherStaging(b), backend_->weight_staging());
      };
    }
    absl::Status s = slots_[i]->Fetch(version, issue);
    if (status.ok() && !s.ok()) status = s;
  }
  return status;
}

absl::Status Engine::FinishGather(PhaseTimes* times) {
  absl::Status status;
  // Every rank takes part in the all-gathers even after an error, or its
  // peers would wait forever at the barrier; the error is kept. In the
  // buckets' order, as every rank of the node.
  for (size_t i = 0; i < buckets_.size(); ++i) {
    absl::Status s = LandBucket(i, times);
    if (status.ok() && !s.ok()) status = s;
  }
  return status;
}

bool Engine::in_flight() const {
  for (const auto& slot : slots_) {
    if (slot->pending().has_value()) return true;
  }
  return in_flight_.running();
}

double Engine::AverageOver() const {
  return static_cast<double>(topo_.world()) * train_.grad_accum_steps();
}

Engine::Coordinated Engine::Coordinate(uint64_t step, trainer::Policy* next) {
  return trainer::CoordinateStep(job_, next, step, AverageOver(), trainer::CoordinateOptions{});
}

void Engine::Failed(const absl::Status& status) {
  // This rank's own gathers of the version no Step brings end at once (on
  // servers that are alive they would wait out their deadline and
  // retries); the slots keep them, so the node's all-gathers still run.
  const std::string why = absl::StrCat("no Step brings the version gathered: ", status.ToString());
  for (const auto& slot : slots_) slot->Cancel(why);
  absl::MutexLock lock(&failure_mu_);  // the rank's thread or a Step's
  if (failure_hook_) failure_hook_(status);
}

absl::Status Engine::LandBucket(size_t index, PhaseTimes* times) {
  trainer::GatherSlot& slot = *slots_[index];
  if (!slot.pending().has_value()) return absl::OkStatus();  // landed once already
  auto t0 = Clock::now();
  Timeline::Record("land_begin", static_cast<int64_t>(index));
  // The coordinator watches its own Step meanwhile (every 200 us): if it
  // fails, no version comes unless the failure hook ends the wait. The
  // bucket lands as soon as its gather is done.
  absl::StatusOr<bool> land = slot.Land([this] {
    in_flight_.Poll();
    return in_flight_.running();
  });
  if (!land.ok() || !*land) return land.status();
  Timeline::Record("land_gathered", static_cast<int64_t>(index));
  if (times != nullptr) times->gather += Since(t0);
  t0 = Clock::now();
  // Every rank takes part in the all-gather even after its gather failed:
  // Landed returns that error after.
  absl::Status s = AllGather(buckets_[index]);
  if (times != nullptr) times->exchange += Since(t0);
  absl::Status gathered = slot.Landed(nullptr);
  return gathered.ok() ? s : gathered;
}

void Engine::LandBelow(uint64_t end) {
  if (!land_early_) return;
  const auto t0 = Clock::now();
  for (size_t i = buckets_.size(); i-- > 0 && buckets_[i].elems.begin < end;) {
    absl::Status s = LandBucket(i, nullptr);
    if (land_error_.ok() && !s.ok()) land_error_ = s;
  }
  land_seconds_ += Since(t0);
}

absl::Status Engine::LandPending(PhaseTimes* times, double* grad_norm) {
  times->gather += land_seconds_;
  land_seconds_ = 0;
  {
    // The Step in flight is joined after the landings, not before them:
    // LandBucket watches it meanwhile (and the push thread sends each
    // bucket of step t+1 as soon as its own blocks are at the new version:
    // the pushes overlap step t's pass instead of waiting for all of it).
    // A bucket the forward landed (or none fetched) lands nothing.
    const auto t0 = Clock::now();
    for (size_t i = buckets_.size(); i-- > 0;) {  // first layer first
      absl::Status s = LandBucket(i, nullptr);
      if (land_error_.ok() && !s.ok()) land_error_ = s;
    }
    times->gather += Since(t0);
    land_early_ = false;
  }
  const auto t0 = Clock::now();
  std::optional<trainer::Verdict> verdict = in_flight_.Take();
  times->step += Since(t0);
  absl::Status status = verdict.has_value() ? verdict->outcome.status : absl::OkStatus();
  if (verdict.has_value()) *grad_norm = verdict->outcome.decision.grad_norm;
  absl::Status landed = std::exchange(land_error_, absl::OkStatus());
  return status.ok() ? landed : status;
}

void Engine::Abandon(const absl::Status& why) {
  // A failing coordinator first makes the waits on the next version end.
  if (!why.ok() && topo_.rank() == 0 && in_flight()) Failed(why);
  // No call of the step outlives it (nor the job handle it uses): the
  // Step, the gathers and the pushes, as zerostate.torch drops them.
  std::vector<trainer::GatherSlot*> slots;
  for (const auto& slot : slots_) slots.push_back(slot.get());
  trainer::AbandonInFlight(&in_flight_, &pusher_, slots);
  land_early_ = false;
  land_error_ = absl::OkStatus();
  land_seconds_ = 0;
}

absl::Status Engine::Drain() {
  PhaseTimes ignored;
  double norm = 0;
  return LandPending(&ignored, &norm);
}

bool Engine::NextRunsStale(uint64_t step) const {
  return policy_.EndsDelayed(step, sync_point_ && sync_point_(step + 1));
}

absl::Status Engine::LoadWeights(uint64_t version) {
  Abandon(absl::OkStatus());
  if (auto s = EnsureStaging(); !s.ok()) return s;
  if (auto s = backend_->AllGathersRead(); !s.ok()) return s;
  absl::Status fetched = StartGather(version, true);
  PhaseTimes ignored;
  absl::Status landed = FinishGather(&ignored);  // every slot fetched takes part
  return fetched.ok() ? landed : fetched;
}

void Engine::SetJob(client::JobClient* job) {
  Abandon(absl::OkStatus());
  job_ = job;
}

void Engine::SaveScaler(uint64_t step) {
  saved_scalers_.insert_or_assign(step, policy_);
  while (saved_scalers_.size() > 4) saved_scalers_.erase(saved_scalers_.begin());
}

bool Engine::RestoreScaler(uint64_t step) {
  auto it = saved_scalers_.find(step);
  if (it == saved_scalers_.end()) return false;
  policy_ = it->second;
  return true;
}

absl::Status Engine::ResumeScaler(uint64_t version) {
  if (train_.precision() != v1::PRECISION_FP16 || version == 0) return absl::OkStatus();
  auto state = job_->TrainerState(version);
  if (!state.ok()) return state.status();
  return policy_.Restore(*state);
}

absl::StatusOr<StepReport> Engine::Step(uint64_t step, const MicroBatchFn& micro_batch) {
  const auto start = Clock::now();
  const client::WireStats wire_before = job_->wire_stats();
  StepReport report;
  report.step = step;
  Timeline::Record("worker_step_begin", static_cast<int64_t>(step));
  report.lr = policy_.LearningRate(step);
  report.loss_scale = policy_.loss_scale();
  pushing_ = false;
  ahead_ = absl::OkStatus();
  next_bucket_ = 0;
  pusher_.Drain().IgnoreError();  // a failed step's pushes (it reported its error)
  push_error_ = absl::OkStatus();
  exchange_seconds_ = 0;
  land_seconds_ = 0;
  if (auto s = EnsureStaging(); !s.ok()) return s;
  if (auto s = backend_->ZeroGrads(); !s.ok()) return s;
  const uint32_t micros = train_.grad_accum_steps();
  GradsReadyFn ready = [&](uint64_t begin) { OnReady(step, begin); };
  for (uint32_t m = 0; m < micros; ++m) {
    auto loss = micro_batch(m, policy_.loss_scale(), m + 1 == micros ? ready : GradsReadyFn());
    if (!loss.ok()) {
      Abandon(loss.status());
      return loss.status();
    }
    report.loss += *loss / static_cast<float>(micros);
  }
  report.times.compute = Since(start) - exchange_seconds_ - land_seconds_;
  Timeline::Record("compute_end", static_cast<int64_t>(step));
  // From here on a failure is kept in `status` and the rank still goes
  // through the step's rendezvous and all-gathers (see engine.h).
  // Delayed update: version `step` lands now, after the backward that ran
  // on the version before it; each push waiting on the push thread goes
  // out as soon as its bucket's gather is in.
  // Layer by layer: the forward landed it; what is left (the Step's
  // outcome, buckets no layer asked for) comes now.
  absl::Status status = LandPending(&report.times, &report.grad_norm);
  report.times.exchange += exchange_seconds_;
  auto t0 = Clock::now();
  absl::Status pushed = PushRemaining(step);  // waits for every push
  Timeline::Record("pushes_acked", static_cast<int64_t>(step));
  if (status.ok()) status = pushed;
  if (status.ok()) status = ahead_;
  report.times.push = Since(t0);

  t0 = Clock::now();
  if (hook_) hook_(Phase::kStep, step);
  const bool fp16 = train_.precision() == v1::PRECISION_FP16;
  const bool coordinator = topo_.rank() == 0;
  // Whole: the Step here, the new version loaded at the end of this step.
  // Else the Step on its own thread and the gathers left out, landed after
  // the next backward (delayed update) or in the next forward.
  const bool stale = NextRunsStale(step);
  const bool synchronous = !stale && !(layer_landing_ && !fp16 &&
                                       !(sync_point_ && sync_point_(step + 1)));
  trainer::Policy next = policy_;  // the policy after this step
  trainer::StepDecision decision;
  // Every rank's gathers go out before the coordinator's Step returns, so
  // the servers answer each block as soon as their pass has stepped it and
  // the gather overlaps the pass. Gathers run on the client's gather pool,
  // the Step on threads of its own: neither waits for the other.
  // The gathers write the staging the landing just read (delayed update).
  if (status.ok()) status = backend_->AllGathersRead();
  // A failed rank's slots are fetched with nothing gathered: it still
  // takes part in the node's all-gathers.
  absl::Status fetched = StartGather(step + 1, status.ok());
  if (status.ok()) status = fetched;
  if (coordinator && status.ok()) {
    if (synchronous) {
      Coordinated done = Coordinate(step, &next);
      status = done.status;
      decision = done.decision;
      report.grad_norm = decision.grad_norm;
    } else {
      // Not fp16 (NormalizeConfig, layer_landing_): the scaler does not move.
      // No Step brings the version every rank's gathers wait for when it
      // fails: its thread ends their waits at once (Failed), wherever this
      // rank's own thread waits meanwhile (a local peer's collective, say).
      status = in_flight_.Start(
          step, next, [this, step](trainer::Policy* p) { return Coordinate(step, p); },
          [this](const absl::Status& failed) { Failed(failed); });
    }
  }
  // The gathers are out and, on the coordinator, the Step is done (or under
  // way; a phase hook's gather phase comes after it, as in a whole step).
  if (hook_) {
    in_flight_.Join().IgnoreError();  // its verdict is reported by the next step
    hook_(Phase::kGather, step);
  }
  // No Step brings step+1 now: the coordinator makes the waits on it end
  // (its own gathers' too) before it waits in the node's collectives.
  if (!status.ok() && coordinator) Failed(status);
  report.times.step += Since(t0);
  // Whole or not by the step alone, never by this rank's status: the node's
  // ranks must run the same all-gathers (a failed rank's gather nothing).
  if (synchronous) {
    absl::Status gathered = FinishGather(&report.times);  // all-gathers even after an error
    if (status.ok()) status = gathered;
  } else {  // the slots stay fetched: landed by the next step (LandPending, LandBelow)
    land_early_ = !stale;
    report.delayed = stale;
  }
  // Version step+1 exists now, and with it the coordinator's scaler state.
  if (fp16 && !coordinator && status.ok()) {
    auto followed = job_->TrainerState(step + 1);
    status = followed.ok() ? next.Restore(*followed) : followed.status();
    decision.skip = next.skipped();
  }
  report.skipped = decision.skip;
  // The node's ranks agree on the outcome, so they roll back (or go on) together.
  auto any_failed = backend_->NodeAnyFailed(!status.ok());
  if (!any_failed.ok()) {
    Abandon(any_failed.status());
    return any_failed.status();
  }
  if (status.ok() && *any_failed) {
    status = absl::AbortedError(
        absl::StrCat("step ", step, " failed on another rank of node ", topo_.node));
  }
  if (!status.ok()) {
    Abandon(status);
    return status;
  }
  policy_ = next;
  report.seconds = Since(start);
  const client::WireStats wire = job_->wire_stats();
  auto per_param = [](uint64_t bytes, uint64_t elems) {
    return elems == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(elems);
  };
  report.push_bytes_per_param = per_param(wire.push_bytes - wire_before.push_bytes,
                                          wire.push_elems - wire_before.push_elems);
  report.gather_bytes_per_param = per_param(wire.gather_bytes - wire_before.gather_bytes,
                                            wire.gather_elems - wire_before.gather_elems);
  Timeline::Record("worker_step_end", static_cast<int64_t>(step));
  return report;
}

}  // namespace zerostate::worker
