// One rank's training run: builds the model, the data and the engine for a
// rank on the CPU backend, and runs the configured number of steps.
// Thread safety: TrainRank is called by each rank's own thread (or
// process); the Client and LocalGroup are shared.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "worker/engine.h"
#include "worker/local_group.h"
#include "worker/peer_watch.h"
#include "worker/recovery.h"

namespace zerostate::worker {

struct RankResult {
  uint64_t start_version = 0;
  uint64_t end_version = 0;
  std::vector<float> losses;  // this rank's loss per step
};

// Called after every step with its report (from the rank's thread).
using StepObserver = std::function<void(const StepReport&)>;

struct RankRun {
  v1::WorkerConfig config;  // normalized for topo.world() ranks
  Topology topo;
  client::Client* client = nullptr;  // not owned
  // The node's local group, not owned, required: one MakeThreadGroup for
  // the threads of a process, or OpenNodeGroup for separate processes.
  LocalGroup* group = nullptr;
  StepObserver observe;
  // Builds this rank's backend once the job's layout is known. Empty: the
  // CPU backend on `group`.
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const Layout&)> make_backend;
  // If set, rank 0 writes the final fp32 master weights here (raw
  // little-endian floats of the whole flat space, padding included).
  std::string dump_path;
  // Periodic checkpoints and rollback after a server restart (the same on
  // every rank).
  RecoveryOptions recovery;
  // If set with a finite peer_timeout: a PeerWatch (worker/peer_watch.h)
  // calls it when a step stalls and some rank of the job is gone.
  absl::Duration peer_timeout = absl::InfiniteDuration();
  PeerGoneFn on_peer_gone;
  // If set, called at each phase of every step (Engine::SetPhaseHook) and
  // before each checkpoint (Phase::kCheckpoint); for fault tests.
  PhaseHook on_phase;
  // The engine's push and gather staging in `client`'s shared buffers, so
  // that same-host servers read and write it in place
  // (Engine::ShareStagingThrough); false: the backend's own memory.
  bool shared_staging = true;
};

// Trains run.config.train().steps() steps (or fewer if the job is further
// along). Collective over every rank of the job. With run.recovery
// enabled, a step that fails because a server restarted is rolled back to
// the last checkpoint on every rank and training goes on (worker/recovery.h).
[[nodiscard]] absl::StatusOr<RankResult> TrainRank(const RankRun& run);

// The number of elements every rank's buffers hold for `config`'s model.
uint64_t FlatElems(const v1::WorkerConfig& config);

// The LocalGroup of a node whose local ranks are separate processes:
// local rank 0 creates the shared memory, the others open it after a
// rendezvous through the state service. Collective over the node's ranks.
// `peer_timeout` bounds every wait on a local peer (worker/local_barrier.h).
[[nodiscard]] absl::StatusOr<std::unique_ptr<LocalGroup>> OpenNodeGroup(
    client::Client* client, const v1::WorkerConfig& config, const Topology& topo,
    absl::Duration peer_timeout = absl::InfiniteDuration());

}  // namespace zerostate::worker
