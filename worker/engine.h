// The worker engine: one training step of one rank, through the state
// service.
//
//   compute   forward/backward of every micro-batch (gradient accumulation);
//             during the last one, each bucket (trainer/bucket_plan.h) is handed
//             on as soon as backward has finished it:
//   exchange  reduce-scatter inside the node: this rank gets its share of
//             the node's summed gradient (every bucket a layer completes
//             is started before the first is waited for:
//             Backend::StartReduceScatter; buckets are cut at
//             TrainConfig.bucket_elems);
//   push      JobClient::PushAsync of the share (the push of early buckets
//             overlaps backward of later layers);
//   step      the coordinator (global rank 0) reads GradStats, decides the
//             clip factor and the fp16 overflow skip, orders Step; in fp16
//             mode the Step carries its loss scaler's next state
//             (trainer/trainer_state.h), which the servers keep; the
//             decision is the step policy's (trainer/policy.h), as in
//             zerostate.torch;
//   gather    GatherAsync of this rank's shares at version step+1, issued
//             before the coordinator's Step returns (the coordinator's
//             right before it orders the Step), so blocks stream back as
//             the servers step them; in fp16
//             mode the other ranks then read the coordinator's scaler state
//             of that version from the servers, so all scalers move
//             together, and nothing but the job is waited on: a rollback
//             that deletes the job releases every rank (worker/recovery.h);
//   exchange  all-gather inside the node: every rank has the new weights.
//
// Gradient scaling: Step's grad_scale folds 1/loss_scale, the clip factor
// and the average over world_size * grad_accum_steps terms (the model's
// loss is already a mean over its micro-batch).
//
// Delayed parameter update (train.delayed_update, ZeRO-Offload's DPU):
// step t may end with its update still in flight: the coordinator's
// GradStats and Step run on a thread of their own and every rank's gathers
// of version t+1 stay out. Step t+1 then runs forward and backward on the
// weights it has (version t), and lands version t+1 after its backward; a
// bucket is pushed as soon as backward finished it and its blocks reached
// version t+1 (the gather of its share is done: its push waits for it on
// the push thread, trainer/engine/pusher.h), while the servers still step
// later blocks. A step ends synchronously (its version reached and loaded)
// when delayed update is off, when the next step is below
// max(warmup_steps, 1), or when the next version is a sync point
// (SetSyncPoints: checkpoints, the last step). A failure of a delayed
// Step is the next step's (or Drain's) error.
//
// Layer by layer (synchronous steps, a backend that reports each layer's
// forward: Backend::SetWeightsNeeded, the CPU and CUDA backends; not fp16
// nor with TrainConfig.whole_landing; with a
// phase hook the coordinator's Step still ends before its gather phase,
// as in a whole step): a step that is not a sync
// point also ends with the coordinator's Step on its thread and the
// gathers out (first layer first, all at once: every layer is prefetched),
// and the next step's forward lands each bucket (gather, then the node's
// all-gather) right before the first layer that needs it, so layer 0
// computes while the servers still step and send later layers. The same
// weights as a whole landing: the same bits.
//
// Speculative step (TrainConfig.speculative_step): before the first push
// the coordinator sends the Step's parameters ahead (JobClient::StepAhead,
// its grad_scale with the clip factor 1), once the Step before it has
// returned, so the servers step each block as soon as its gradients are
// in; the Step then confirms or redoes it. Its weights land layer by layer
// in the next forward too. The weights are bit-identical to those of the
// plain step.
//
// Errors: a failed step still takes part in every intra-node collective
// and waits for every call it started, so peers are never left at a
// barrier and no call of the failed step outlives it; then SetJob and
// LoadWeights can roll the rank back (worker/recovery.h).
//
// Thread safety: one thread per Engine. Give each Engine its own Client:
// gathers waiting for the step hold threads of the client's gather pool,
// which is sized for one rank (the Step fans out on threads of its own).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "trainer/bucket_plan.h"
#include "trainer/engine/coordinator.h"
#include "trainer/engine/gather_slot.h"
#include "trainer/engine/in_flight.h"
#include "trainer/engine/pusher.h"
#include "trainer/policy.h"
#include "worker/backend.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::worker {

// Where a rank sits in the job (torchrun's variables).
struct Topology {
  uint32_t node = 0;        // NODE_RANK
  uint32_t num_nodes = 1;
  uint32_t local_rank = 0;  // LOCAL_RANK
  uint32_t local_size = 1;  // LOCAL_WORLD_SIZE
  uint32_t rank() const { return node * local_size + local_rank; }  // RANK
  uint32_t world() const { return num_nodes * local_size; }         // WORLD_SIZE
};

// Seconds spent in each phase of a step, as this rank saw them.
struct PhaseTimes {
  double compute = 0, exchange = 0, push = 0, step = 0, gather = 0;
};

struct StepReport {
  uint64_t step = 0;
  float loss = 0;         // this rank's mean over its micro-batches
  float lr = 0;
  float loss_scale = 1;   // the scale this step ran with
  bool skipped = false;
  // Coordinator only: of this step, or of the step before when that one's
  // Step ran on into this one (delayed update, layer by layer).
  double grad_norm = 0;
  bool delayed = false;   // this step ended with its update in flight
  double seconds = 0;
  PhaseTimes times;
  // Payload bytes per parameter this rank's pushes and gathers moved on
  // the wire during the step (JobClient::wire_stats; 0: none finished):
  // the dtype's size on the plain wire, about 1.016 on the int8 wire.
  double push_bytes_per_param = 0;
  double gather_bytes_per_param = 0;
};

// Points of a step where a test can stop global rank 0 (--test_pause), so
// that a fault lands in that phase: before its first push, before the
// coordinator's GradStats and Step, after the Step while the gathers of
// the new version are out, and (worker/trainer.h) before the checkpoint of
// a version.
enum class Phase { kPush, kStep, kGather, kCheckpoint };
const char* PhaseName(Phase phase);  // "push", "step", "gather", "checkpoint"
// Called on the rank's thread at `phase` of step `step` (for kCheckpoint:
// of version `step`); may block.
using PhaseHook = std::function<void(Phase phase, uint64_t step)>;

// Runs micro-batch `micro` of the current step: forward and backward on the
// backend with `loss_scale`, passing `ready` on; returns the loss.
using MicroBatchFn =
    std::function<absl::StatusOr<float>(uint32_t micro, float loss_scale, const GradsReadyFn& ready)>;

class Engine {
 public:
  // `job` and `backend` are not owned and must outlive the Engine.
  // `ready_points` are the flat offsets the model reports during backward.
  // REQUIRES: train normalized; topo.local_size == backend->local_size().
  Engine(client::JobClient* job, Backend* backend, const v1::TrainConfig& train, Topology topo,
         std::vector<uint64_t> ready_points);
  ~Engine();  // waits for whatever is in flight

  // Loads the weights at version >= `version` into every local rank
  // (gather of this rank's shares, then all-gather). Collective.
  [[nodiscard]] absl::Status LoadWeights(uint64_t version);

  // Runs optimizer step `step` (0-based; the job must be at version `step`).
  // Collective over every rank of the job. Errors: the first failing call's
  // status (client, backend or model).
  [[nodiscard]] absl::StatusOr<StepReport> Step(uint64_t step, const MicroBatchFn& micro_batch);

  // Continues on `job` (not owned; a new handle after a restore). Whatever
  // a delayed update left in flight is waited for and dropped.
  void SetJob(client::JobClient* job);

  // Delayed update: `sync(v)` true makes the step that brings version v
  // end synchronously (checkpoints, the run's last version). Empty: none.
  void SetSyncPoints(std::function<bool(uint64_t version)> sync) { sync_point_ = std::move(sync); }

  // Finishes a delayed update in flight (the coordinator's Step, the
  // gathers, the node's all-gather), so the local weights are the job's
  // version. No-op when none is. Collective. Errors: the delayed Step's,
  // the gathers'.
  [[nodiscard]] absl::Status Drain();
  // True while a delayed update is in flight.
  bool in_flight() const;

  // Takes the push and gather staging from `client`'s shared buffers
  // (Client::AllocateShared, registered with the backend: AdoptHost), so
  // that a state server on this host folds the pushes straight out of it
  // and writes the gathers straight into it, the client copying nothing
  // (docs/architecture.md, "a same-host data plane through shared
  // memory"); null (the default): the backend's own (AllocHost). Before
  // the first step; `client` (not owned) must outlive the Engine. A
  // shared buffer the kernel refuses falls back to AllocHost.
  // A backend whose node has one rank may offer its own gradients and
  // parameters as the staging (Backend::GradsInPlace): the shared staging
  // then is not used (either way a same-host server reads and writes
  // memory the rank's thread does not copy).
  void ShareStagingThrough(client::Client* client) {
    staging_client_ = client;
    grads_in_place_ = params_in_place_ = nullptr;
  }

  // Calls `hook` at each phase of every step from now on (empty: none).
  void SetPhaseHook(PhaseHook hook) { hook_ = std::move(hook); }

  // Coordinator: calls `hook` with the error when a step fails on this rank
  // before or in its Step, i.e. no Step will bring the version the ranks
  // are waiting for; it must make their waits end (Recovery::Prepare
  // deletes a job that lost a shard), or the local peers waiting on them
  // in the node's all-gather would never get here. A Step left in flight
  // (delayed update, layer by layer) calls it on its own thread, at once.
  void SetFailureHook(std::function<void(const absl::Status&)> hook) {
    absl::MutexLock lock(&failure_mu_);
    failure_hook_ = std::move(hook);
  }

  // fp16: takes the loss scaler's state at `version` from the servers (what
  // the Step that made it carried), so a run that resumes the job goes on
  // with the scale an uninterrupted run would have. No-op without fp16 or
  // at version 0. Errors: NOT_FOUND (the servers keep none for `version`:
  // the job was restored by hand, or stepped by an older worker; the scaler
  // is left as it is), DATA_LOSS (malformed), the servers' errors.
  [[nodiscard]] absl::Status ResumeScaler(uint64_t version);

  // Remembers the loss scaler's state as of the start of `step`, and puts
  // it back (fp16 loss scaling replays from the same scale). RestoreScaler
  // of a step never saved keeps the current state and returns false.
  void SaveScaler(uint64_t step);
  bool RestoreScaler(uint64_t step);

  const Topology& topology() const { return topo_; }
  float loss_scale() const { return policy_.loss_scale(); }

 private:
  using Bucket = trainer::PlannedBucket;
  // The coordinator's part of a step: GradStats, the decision, Step
  // (trainer/engine/coordinator.h, as zerostate.torch runs it).
  using Coordinated = trainer::Coordinated;
  // Decides with `next` (moving it on) and orders the Step.
  Coordinated Coordinate(uint64_t step, trainer::Policy* next);
  // The (rank, micro-batch) terms the summed gradient averages over.
  double AverageOver() const;
  // The pending gathers not landed yet, landed (first layer first); then
  // the coordinator's Step in flight, if any (its failure goes to the
  // failure hook).
  [[nodiscard]] absl::Status LandPending(PhaseTimes* times, double* grad_norm);
  // A coordinator's step failed (`status`): no Step brings the version its
  // slots gathered; their gathers are cancelled (the slots keep them) and
  // the failure hook runs, one call at a time.
  void Failed(const absl::Status& status);
  // Bucket `index`'s fetched gather, then its all-gather (collective),
  // once (its slot); `times` (may be null) takes the wait and the
  // all-gather apart.
  [[nodiscard]] absl::Status LandBucket(size_t index, PhaseTimes* times);
  // Layer by layer: lands every bucket below `end` (WeightsNeededFn).
  void LandBelow(uint64_t end);
  // The next step runs on this step's weights (delayed update).
  bool NextRunsStale(uint64_t step) const;
  // Waits for and drops whatever a delayed update left in flight; a failing
  // coordinator (`why` not OK) first calls the failure hook.
  void Abandon(const absl::Status& why);
  void OnReady(uint64_t step, uint64_t ready_begin);
  // Queues bucket `index`'s push of step `step` on the push thread; under
  // a delayed update it waits there for the bucket's pending gather.
  void PushBucket(uint64_t step, size_t index);
  // Pushes the rest, then waits for every push of the step.
  [[nodiscard]] absl::Status PushRemaining(uint64_t step);
  // Fetches every bucket's slot at `version`, first layer first: its
  // gather, or (not `gather`, a rank that failed; an empty share) nothing,
  // the rank still taking part in the node's all-gathers.
  [[nodiscard]] absl::Status StartGather(uint64_t version, bool gather);
  // Lands every slot fetched (LandBucket); the first error.
  [[nodiscard]] absl::Status FinishGather(PhaseTimes* times);

  client::JobClient* job_;
  std::map<uint64_t, trainer::Policy> saved_scalers_;
  Backend* const backend_;
  const v1::TrainConfig train_;
  const Topology topo_;
  std::vector<Bucket> buckets_;  // in backward order
  [[nodiscard]] absl::Status EnsureStaging();
  // One staging buffer of staging_elems_ floats: shared (staging_client_)
  // or the backend's.
  [[nodiscard]] absl::StatusOr<HostBuffer> AllocStaging();
  client::Client* staging_client_ = nullptr;

  uint64_t staging_elems_ = 0;
  // From AllocStaging (pinned on a GPU): staging_elems_ floats each, of
  // which the buckets' shares take staging_elems_ elements of the
  // backend's grad_staging() and weight_staging() dtypes (at most 4 bytes).
  HostBuffer push_staging_, gather_staging_;
  // The backend's own gradients and parameters as the staging (nullptr:
  // the buffers above): pushes read the gradients, gathers write the
  // parameters, and no collective copies. Not the parameters with the
  // delayed update, whose gathers land while the backward still reads
  // the version before.
  float* grads_in_place_ = nullptr;
  float* params_in_place_ = nullptr;
  // Where bucket `b`'s share lies in them.
  void* PushStaging(const Bucket& b) const;
  // Speculative step, the coordinator at its first push: joins the Step in
  // flight and sends this step's parameters ahead (ahead_).
  void SendAhead(uint64_t step);
  // The node's all-gather of bucket `b` from its gather staging (none when
  // the gather wrote the parameters in place).
  [[nodiscard]] absl::Status AllGather(const Bucket& b);
  void* GatherStaging(const Bucket& b) const;
  trainer::Policy policy_;  // the coordinator's decisions, every rank's loss scale
  // Starts each bucket's push (trainer/engine/pusher.h, as zerostate.torch
  // does); PushRemaining drains it.
  trainer::Pusher pusher_;

  PhaseHook hook_;
  absl::Mutex failure_mu_;  // serializes failure_hook_ (a Step's thread calls it too)
  std::function<void(const absl::Status&)> failure_hook_ ABSL_GUARDED_BY(failure_mu_);
  std::function<bool(uint64_t)> sync_point_;

  // Each bucket's gather, landed once (trainer/engine/gather_slot.h, as
  // zerostate.torch lands each module): under a delayed update (see the
  // top of this file) the next version's stay fetched until they land.
  std::vector<std::unique_ptr<trainer::GatherSlot>> slots_;  // by bucket index
  bool land_early_ = false;   // land in the next forward, layer by layer
  // The coordinator's Step in flight, and its verdict until reported
  // (its thread gives a failure to the failure hook at once).
  trainer::InFlightStep in_flight_;
  bool layer_landing_ = false;  // the backend reports each layer's forward

  // Per-step state, reset by Step().
  bool pushing_ = false;  // the push phase began (hook_ called)
  absl::Status ahead_;    // the speculative step's StepAhead (SendAhead)
  size_t next_bucket_ = 0;
  absl::Status push_error_;
  absl::Status land_error_;
  double exchange_seconds_ = 0;
  double land_seconds_ = 0;  // landing inside compute
};

}  // namespace zerostate::worker
