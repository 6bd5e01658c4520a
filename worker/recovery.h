// Periodic checkpoints and rollback after a state server restarted.
//
// Checkpoints: with checkpoint_every = N > 0 the coordinator (global rank
// 0) makes every server write the job at the start version and at every
// version that is a multiple of N, right after the step that produced it
// completed (JobClient::Checkpoint; no step runs meanwhile, since the next
// Step is the coordinator's). It remembers the last complete one, and once
// the servers reported it written, deletes the job's older checkpoints
// beyond the newest keep_checkpoints (worker/checkpoint_pruner.h); the one
// a rollback uses is the newest, never deleted. A failed deletion is logged
// and training goes on.
//
// Rollback: a step failed on some rank. Every rank calls RollBack (the
// engine made sure no call of the failed step is still running). The
// coordinator asks every server for the job: a server that answers with a
// new incarnation or without the job restarted and lost its shard. Then it
//   1. deletes the job on every server: a rank still waiting on a server
//      (a gather of a version that will never come) gets NOT_FOUND and
//      enters the rollback too;
//   2. waits until every rank has entered (rendezvous "recover/<e>/enter"),
//      so no call of the old epoch can reach the restored job;
//   3. restores the last complete checkpoint on every server (RestoreJob);
//   4. tells every rank the version to continue from ("recover/<e>/go"),
//      or why it cannot ("failed: ..."), and every rank fails then.
// A server that does not answer within server_wait (gone for good) ends
// the run on every rank with an error naming it; the job is deleted on the
// servers that answer first, as in step 1, so no rank stays waiting there.
// The other ranks attach to the restored job. Every rank then reloads the
// weights at that version and continues from that step: the data position
// is a function of the step (worker/teacher_data.h), so the replayed steps
// see the same samples and end bit-identical to a run without the fault.
//
// Thread safety: one Recovery per rank, used from the rank's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "worker/engine.h"

namespace zerostate::worker {

struct RecoveryOptions {
  // Checkpoint every this many steps; 0: never (a restarted server then
  // ends the run on every rank with an error naming it).
  uint64_t checkpoint_every = 0;
  // Absolute directory every server can write and read.
  std::string checkpoint_dir;
  // Checkpoints of the job kept on disk, the newest first; older ones are
  // deleted after each new one is complete. 0: keep all. Negative: invalid.
  int64_t keep_checkpoints = 2;
  // How long the coordinator waits for a restarted server to answer again
  // (zerostate-worker: --server_wait_seconds, which also sets the clients'
  // ClientOptions::unavailable_wait, so every rank's calls wait as long).
  absl::Duration server_wait = absl::Seconds(300);
};

// Checks the options. Errors: INVALID_ARGUMENT naming the flag.
[[nodiscard]] absl::Status ValidateRecoveryOptions(const RecoveryOptions& options);

struct RolledBack {
  std::unique_ptr<client::JobClient> job;  // the restored job's handle
  uint64_t version = 0;                    // continue with this step
  uint32_t epoch = 0;                      // for PeerWatch::Enter
};

class Recovery {
 public:
  // `client` is not owned. `scope` namespaces the rendezvous.
  Recovery(client::Client* client, const Topology& topo, std::string scope,
           RecoveryOptions options);

  bool enabled() const { return options_.checkpoint_every > 0; }

  // True if the coordinator checkpoints the job at `version`.
  bool CheckpointDue(uint64_t version, uint64_t start_version) const;

  // Coordinator: writes the checkpoint of `version` if due, remembers it
  // and prunes older ones (their failures are logged, not returned).
  // Others: no-op. Errors: JobClient::Checkpoint's.
  [[nodiscard]] absl::Status AfterStep(client::JobClient* job, uint64_t version,
                                       uint64_t start_version);

  // Coordinator, as soon as its part of a step failed (Engine's failure
  // hook): decides what RollBack will do, now, so that a job that lost a
  // shard is deleted before this rank waits in the node's collectives for
  // local peers that wait on the job. Others: no-op.
  void Prepare(client::JobClient* job);

  // Collective over every rank, after a failed step (`failure`), with or
  // without checkpoints. Errors: ABORTED, the same on every rank, when a
  // server lost its shard and there is no checkpoint (checkpoint_every 0):
  // it names the server, says the job was deleted everywhere (no rank
  // keeps waiting on a survivor) and to restore it from a checkpoint;
  // ABORTED too, the same on every rank, when a server did not answer
  // within server_wait: it names the server and says the job was deleted
  // on the servers that answer (no rank waits out its rpc_timeouts there);
  // else `failure`, with the reason no rollback was possible appended.
  [[nodiscard]] absl::StatusOr<RolledBack> RollBack(client::JobClient* job,
                                                    const absl::Status& failure);

  // Coordinator: "" if every server holds the job, else what the servers
  // answered (naming the one that restarted and lost its shard, or did not
  // answer within server_wait): JobClient::Loss. Changes nothing.
  [[nodiscard]] absl::StatusOr<std::string> LostShard(client::JobClient* job) const;

 private:
  // The coordinator's part before the fence: "" when the restore can go
  // ahead (the job is deleted everywhere), else "failed: <why>".
  std::string Decide(client::JobClient* job);
  // Deletes checkpoints older than the newest keep_checkpoints; logs.
  void Prune(const client::JobClient& job, const std::string& written, uint64_t version) const;
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Meet(const std::string& what,
                                                              const std::string& value);

  client::Client* const client_;
  const Topology topo_;
  const std::string scope_;
  const RecoveryOptions options_;
  uint32_t epoch_ = 0;
  std::optional<std::string> verdict_;  // coordinator: Decide's, from Prepare
  std::string last_checkpoint_;  // coordinator: path of the last complete one
  uint64_t last_checkpoint_version_ = 0;
};

}  // namespace zerostate::worker
