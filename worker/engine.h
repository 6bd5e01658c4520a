// The worker engine: one training step of one rank, through the state
// service.
//
//   compute   forward/backward of every micro-batch (gradient accumulation);
//             during the last one, each bucket (worker/buckets.h) is handed
//             on as soon as backward has finished it:
//   exchange  reduce-scatter inside the node: this rank gets its share of
//             the node's summed gradient;
//   push      JobClient::PushAsync of the share (the push of early buckets
//             overlaps backward of later layers);
//   step      the coordinator (global rank 0) reads GradStats, decides the
//             clip factor and the fp16 overflow skip, orders Step; in fp16
//             mode the Step carries its loss scaler's next state
//             (worker/trainer_state.h), which the servers keep;
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
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "worker/backend.h"
#include "worker/step_policy.h"
#include "worker/trainer_state.h"
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
  double grad_norm = 0;   // coordinator only
  double seconds = 0;
  PhaseTimes times;
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

  // Loads the weights at version >= `version` into every local rank
  // (gather of this rank's shares, then all-gather). Collective.
  [[nodiscard]] absl::Status LoadWeights(uint64_t version);

  // Runs optimizer step `step` (0-based; the job must be at version `step`).
  // Collective over every rank of the job. Errors: the first failing call's
  // status (client, backend or model).
  [[nodiscard]] absl::StatusOr<StepReport> Step(uint64_t step, const MicroBatchFn& micro_batch);

  // Continues on `job` (not owned; a new handle after a restore).
  void SetJob(client::JobClient* job);

  // Calls `hook` at each phase of every step from now on (empty: none).
  void SetPhaseHook(PhaseHook hook) { hook_ = std::move(hook); }

  // Coordinator: calls `hook` with the error when a step fails on this rank
  // before or in its Step, i.e. no Step will bring the version the ranks
  // are waiting for; it must make their waits end (Recovery::Prepare
  // deletes a job that lost a shard), or the local peers waiting on them
  // in the node's all-gather would never get here.
  void SetFailureHook(std::function<void(const absl::Status&)> hook) {
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
  float loss_scale() const { return scaler_.scale(); }

 private:
  struct Bucket {
    Range elems;
    Range share;         // this rank's part
    uint64_t staging;    // offset of the share in the staging buffers
  };
  void OnReady(uint64_t step, uint64_t ready_begin);
  absl::Status PushRemaining(uint64_t step);
  std::vector<client::Ticket> StartGather(uint64_t version);
  absl::Status FinishGather(std::vector<client::Ticket>& tickets, PhaseTimes* times);
  // Ranks other than the coordinator: the scaler state and skip the
  // coordinator left with the servers for `version`.
  absl::StatusOr<TrainerState> CoordinatorScaler(uint64_t version);

  client::JobClient* job_;
  std::map<uint64_t, LossScaler> saved_scalers_;
  Backend* const backend_;
  const v1::TrainConfig train_;
  const Topology topo_;
  std::vector<Bucket> buckets_;  // in backward order
  absl::Status EnsureStaging();

  uint64_t staging_elems_ = 0;
  HostBuffer push_staging_, gather_staging_;  // from the backend (pinned on a GPU)
  LossScaler scaler_;

  PhaseHook hook_;
  std::function<void(const absl::Status&)> failure_hook_;

  // Per-step state, reset by Step().
  bool pushing_ = false;  // the push phase began (hook_ called)
  size_t next_bucket_ = 0;
  std::vector<client::Ticket> push_tickets_;
  absl::Status push_error_;
  double exchange_seconds_ = 0;
};

}  // namespace zerostate::worker
