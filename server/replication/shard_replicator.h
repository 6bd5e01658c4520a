// One shard's way to its backups, on the server that serves it as primary
// (docs/reliability.md, "Replicated shards"): the StepReplicator
// that Replicator::For makes, kept by the shard's JobStep for the job's
// life.
//
// A streamed step travels to each live backup as Replicator::lanes()
// connections to its TCP data plane, which carry the blocks' summed
// gradients (REPLICA_SUM frames, each answered), and one
// ReplicaService.ApplyStep call that carries the request once every lane
// was answered (a transfer id ties them together). Once the previous step
// was acknowledged, the shard is armed for the next one: each block's
// summed gradient is sent as soon as the push that completes the block
// (every node's gradient folded in) tells this object (OnBlockComplete),
// by the first free lane (a thread each), while the other blocks still
// fold (on a fixed set of threads made with this object, no thread per
// step). No sum is copied on the way: a lane sends it straight from the
// block's accumulator, pinned there while it travels (Block::PinSum).
// Once the Step is decided, every block of the step is pinned until the
// backups hold it, and the lanes share out the sums not sent yet, from
// the accumulators, while the pass reads them too (a commit does not
// wait for them; a push of the next version does); the request goes
// last, on ApplyStep. (Where a copy gets the step whole, a lane failed,
// or the backups did not acknowledge it and a retry resends it, the sums
// are copied into the payload, from the pinned accumulators.) The backup answers
// ApplyStep once it holds the step (HeldSteps, server/core/held_steps.h)
// and applies it behind the primary, so the Step waits, after its pass
// and without the pass mutex, only for the last blocks' transfer. A step that was not armed (the first
// one, a retry) goes whole on ApplyStep at Decide, as does a step to a
// backup whose data port is not known yet (learned from its ApplyStep
// answers) or one of whose lanes failed, or to a copy that rejoins.
//
// A lost copy is caught up in the background (catch_up.h): a Step that
// finds it lost with no catch-up has its server probed on a thread of this
// object's own (never on a step's path), which, once the server answers,
// reads the shard's state between two passes and starts the copy's
// CatchUp; each later step decided while it
// runs is handed to it whole, and once the catch-up says the copy
// rejoins (CatchUp::Offer), the step goes to the copy whole after the
// backlog, as to a live copy, and its acknowledgement makes the copy live
// again (Judge).
//
// Thread-safe. Lock order: a block's mutex, then this object's mutex (a
// Block's mutex is never taken under this object's). The job's pass mutex,
// then catch_up_mu_ (then a CatchUp's mutex); probe_mu_ alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/core/job.h"
#include "server/core/thread_pool.h"
#include "server/replication/catch_up.h"
#include "server/replication/replicator.h"

namespace zerostate::server {

class ShardReplicator final : public StepReplicator {
 public:
  // `copies`: the shard's other copies (server index, address). `owner`
  // and `job` must outlive this object.
  ShardReplicator(Replicator& owner, Job& job, std::vector<std::pair<uint32_t, std::string>> copies,
                  std::string token);
  // Cancels a stream in progress and stops the streaming thread.
  ~ShardReplicator() override;

  void OnBlockComplete(const Block& b) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  std::function<absl::Status()> Decide(const v1::StepRequest& req,
                                       std::shared_ptr<const Payload>* sent) override;
  std::function<absl::Status()> Resend(std::shared_ptr<const Payload> payload) override;

 private:
  // One copy's outcome of a step.
  struct Result {
    uint32_t server = 0;
    std::string address;
    bool catch_up = false;  // the copy was lost: its catch-up's step or failure
    absl::Status status;
    uint64_t seed_bytes = 0;  // the catch-up's
    // A copy that rejoins: its catch-up, whose backlog the send waits for
    // (CatchUp::Drain) before it sends this one.
    std::shared_ptr<CatchUp> rejoin;
  };
  // One lane of a streamed step to one copy (the streaming thread's).
  struct Stream;

  // Sends `payload` whole to each copy in `to` that is live, or lost and
  // caught up (CatchUpStep), on a thread each; the function returned
  // joins them and gives their results.
  std::function<std::vector<Result>()> SendWhole(std::shared_ptr<const Payload> payload,
                                                 const std::vector<uint32_t>& to);
  // Lost copy `server`'s part in step `payload`: handed to its catch-up
  // (kept), or, once the catch-up says the copy rejoins, a Result in
  // `sends` (the step goes to the copy as to a live one after the
  // backlog; its acknowledgement revives it). A dropped catch-up ends (a
  // later step starts another); one that met a newer primary (ABORTED)
  // gives its Result in `done`, for Judge. With no catch-up, the copy's
  // server is probed (Probe), off the step's path.
  void CatchUpStep(uint32_t server, const std::string& address,
                   const std::shared_ptr<const Payload>& payload, std::vector<Result>* sends,
                   std::vector<Result>* done) ABSL_LOCKS_EXCLUDED(catch_up_mu_);
  // Queues a probe of lost copy `server`'s server on the prober thread,
  // unless one is queued or running.
  void Probe(uint32_t server, const std::string& address) ABSL_LOCKS_EXCLUDED(probe_mu_);
  // The prober thread: probes the queued lost copies, one at a time
  // (Replicator::Reconnect, up to its reconnect timeout), and starts the
  // catch-up of each that answers (StartCatchUp).
  void ProbeLoop() ABSL_LOCKS_EXCLUDED(probe_mu_);
  // Starts lost copy `server`'s catch-up from the shard's state read now,
  // between two passes (under the job's pass mutex), unless the copy was
  // deposed, is no longer lost or has one already: the next step decided
  // is the first of its backlog.
  void StartCatchUp(uint32_t server, const std::string& address)
      ABSL_LOCKS_EXCLUDED(catch_up_mu_);
  // Ends every catch-up (the copy was deposed).
  void DropCatchUps() ABSL_LOCKS_EXCLUDED(catch_up_mu_);
  // The Step's answer from the copies' results: lost ones marked, caught
  // up ones revived, other errors UNAVAILABLE naming the backup. A copy
  // that answered ABORTED is the shard's primary now, or accepted a newer
  // primary's term: this copy is deposed and this server fenced for the
  // shard (Replicator::Depose), and the answer is UNAVAILABLE "not
  // primary" naming the shard and every copy that refused, with its reason.
  [[nodiscard]] absl::Status Judge(uint64_t step, const std::vector<Result>& results);
  // Judge, then Rearm.
  [[nodiscard]] absl::Status Conclude(uint64_t step, const std::vector<Result>& results);
  // After step `step`: arms the next step, unless the copy was deposed
  // (then ends its catch-ups).
  void Rearm(uint64_t step);
  // Arms `step`: the blocks already complete at that version are queued
  // (the others as their pushes complete them).
  void Arm(uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // Back to no stream, nothing armed. REQUIRES: no stream open.
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The streaming thread: waits for an armed step's first complete block,
  // takes the lanes to each live copy, sends each queued block's sum, then,
  // once decided, the rest, then the request.
  void StreamLoop();
  void StreamStep(uint64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One lane's sums of `step` under `transfer` on `calls` (one per copy):
  // queued blocks until the step is decided, then a share of those not
  // sent. A copy's lane that fails sends no more.
  void SendLane(uint64_t step, uint64_t transfer, std::vector<std::unique_ptr<Stream>>& calls)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Breaks the lanes of the stream in progress (their sends fail at once).
  void CancelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs fn(0) .. fn(n - 1) on this object's lanes' threads (lane_pool_)
  // and the caller's, and returns when all have run.
  void OnLanes(size_t n, const std::function<void(size_t)>& fn);
  // Block b's sum as a backup takes it (fp32 bytes), pinned: the
  // accumulator's own memory, or, in single-gradient mode, widened into
  // `scratch`.
  static std::string_view SumOf(const Block& b, std::string* scratch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu);
  // Pins block `local`'s sum if it is complete at `step`, and gives it
  // (SumOf); nullopt when it is not. The caller unpins it (Unpin).
  std::optional<std::string_view> PinFor(uint64_t local, uint64_t step,
                                         std::string* scratch) const;
  // Block `local`'s sum, which Decide pinned (SumOf).
  std::string_view Pinned(uint64_t local, std::string* scratch) const;
  void Unpin(uint64_t local) const;
  // Copies every block's sum into `payload` (the decided step's, its
  // blocks pinned), once per step: for a copy that gets it whole or a
  // retry's Resend. Not while lanes send from it.
  void FillWhole(Payload& payload) ABSL_LOCKS_EXCLUDED(mu_);

  Replicator& owner_;
  Job& job_;
  const std::string job_id_;
  const uint32_t shard_;
  const uint64_t blocks_;
  const std::vector<std::pair<uint32_t, std::string>> copies_;  // server index, address
  const std::string token_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t armed_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;  // UINT64_MAX: none
  std::vector<uint64_t> queue_ ABSL_GUARDED_BY(mu_);  // complete blocks (local) of armed_
  std::vector<bool> taken_ ABSL_GUARDED_BY(mu_);      // by local: the stream took it
  std::vector<bool> sent_ ABSL_GUARDED_BY(mu_);       // by local: the stream sent it
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // blocks taken by lanes, not yet pinned
  std::vector<size_t> remaining_ ABSL_GUARDED_BY(mu_);  // once decided: the blocks not sent
  size_t next_remaining_ ABSL_GUARDED_BY(mu_) = 0;      // the next of them a lane takes
  bool streaming_ ABSL_GUARDED_BY(mu_) = false;  // a stream of armed_ is open
  bool deciding_ ABSL_GUARDED_BY(mu_) = false;   // Decide runs: the stream takes no more blocks
  std::vector<uint32_t> streamed_to_ ABSL_GUARDED_BY(mu_);  // copies it is open to
  std::vector<int> lane_fds_ ABSL_GUARDED_BY(mu_);          // its lanes' sockets, to cancel it
  std::shared_ptr<Payload> decided_ ABSL_GUARDED_BY(mu_);  // the streamed step, once decided
  bool whole_ ABSL_GUARDED_BY(mu_) = false;  // the decided step's payload holds its sums
  std::vector<uint64_t> pinned_ ABSL_GUARDED_BY(mu_);  // blocks (local) Decide pinned
  bool abandon_ ABSL_GUARDED_BY(mu_) = false;  // end the stream without the step
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Result> stream_results_ ABSL_GUARDED_BY(mu_);
  uint64_t next_transfer_ = 0;  // the streaming thread's
  // Replicator::lanes() - 1 threads, made once, for a step's lanes beside
  // the streaming thread and for Decide's copies (null with one lane).
  std::unique_ptr<ThreadPool> lane_pool_;
  std::thread streamer_;

  // Lost copies' servers probed off the steps' path (TakeReachable).
  absl::Mutex probe_mu_;
  bool probe_stop_ ABSL_GUARDED_BY(probe_mu_) = false;
  std::vector<std::pair<uint32_t, std::string>> to_probe_ ABSL_GUARDED_BY(probe_mu_);
  absl::flat_hash_set<uint32_t> probing_ ABSL_GUARDED_BY(probe_mu_);  // queued or running
  std::thread prober_;

  // Lost copies being caught up, by server index.
  absl::Mutex catch_up_mu_;
  absl::flat_hash_map<uint32_t, std::shared_ptr<CatchUp>> catch_ups_
      ABSL_GUARDED_BY(catch_up_mu_);
};

}  // namespace zerostate::server
