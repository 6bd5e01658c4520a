// What a JobClient holds: the job's normalized spec and layout, the
// servers' incarnations seen at register/attach, the byte budget, and a
// count of calls in flight that its destructor waits for.
// Thread-safe; constant after construction but for the budget and counts.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/byte_budget.h"
#include "client/client_impl.h"
#include "client/ticket_state.h"
#include "client/transfer.h"

namespace zerostate::client {

// The job's version from each server's lowest block version (`versions`,
// shard order; servers that hold no block are left out): the lowest.
// Errors: FAILED_PRECONDITION naming every server's version, and what to
// do, when they are more than one step apart (one step: a step in flight)
// -- e.g. a restarted server's shard registered again at version 0 next
// to shards that trained on (client/job_setup.cc).
[[nodiscard]] absl::StatusOr<uint64_t> AgreedVersion(Client::Impl& client, const Layout& layout,
                                                     const std::string& job_id,
                                                     const std::vector<uint64_t>& versions);

class JobClient::Impl {
 public:
  // Registers a normalized spec on every server (client/job_setup.cc).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<JobClient>> Register(
      std::shared_ptr<Client::Impl> client, const v1::JobSpec& spec);
  // Restores a checkpoint on every server, then attaches (client/job_setup.cc).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<JobClient>> Restore(
      std::shared_ptr<Client::Impl> client, const std::string& path, uint32_t num_nodes);
  // Attaches to a registered job (client/job_setup.cc).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<JobClient>> Attach(
      std::shared_ptr<Client::Impl> client, const std::string& job_id);

  // `data_ports`: the data plane port each server advertised (0 or
  // missing: none).
  Impl(std::shared_ptr<Client::Impl> client, v1::JobSpec spec,
       std::vector<uint64_t> incarnations, const std::vector<uint32_t>& data_ports = {});
  // Waits until every call started through this job has completed.
  ~Impl();

  const v1::JobSpec& spec() const { return spec_; }
  const Layout& layout() const { return layout_; }
  std::string token() const { return client_->job_token().Get(); }
  WireStats wire_stats() const { return tally_.Get(); }
  void SetPushesHeld(bool held) { pushes_held_ = held; }

  Ticket PushAsync(uint64_t step, uint32_t node, Range elems, const void* data, v1::DType dtype);
  Ticket GatherAsync(uint64_t min_version, Range elems, void* out, v1::DType dtype,
                     bool master);
  [[nodiscard]] absl::Status InitWeights(Range elems, const float* data);
  [[nodiscard]] absl::StatusOr<GradStatsResult> GradStats(uint64_t step);
  [[nodiscard]] absl::Status Step(uint64_t step, float lr, float grad_scale, bool skip,
                                  const std::string& trainer_state);
  [[nodiscard]] absl::Status StepAhead(uint64_t step, float lr, float grad_scale);
  [[nodiscard]] absl::StatusOr<std::string> TrainerState(uint64_t version);
  [[nodiscard]] absl::StatusOr<uint64_t> Version();
  [[nodiscard]] absl::StatusOr<std::string> Checkpoint(uint64_t version, const std::string& root);
  [[nodiscard]] absl::Status Delete();

 private:
  // Sends a Step request to every server, in parallel.
  [[nodiscard]] absl::Status SendStep(const v1::StepRequest& req);
  // A ticket of `parts` parts that also counts as one call in flight.
  std::shared_ptr<Ticket::State> BeginCall(int parts);
  // Runs run(plan, ticket) -> absl::Status for each stream of `elems` on
  // the pool; the returned ticket completes when all have.
  template <class RunStream>
  Ticket StartStreams(ThreadPool& pool, std::vector<StreamPlan> plans, RunStream run);
  // The streams of a call of `elems` on `wire` (chunks of the options' bytes).
  std::vector<StreamPlan> Plans(Range elems, v1::DType wire) const;
  // The streams of a gather of `elems` on `wire`: Plans', but where every
  // server shares this host, each spans kSameHostGatherStreamBlocks blocks
  // at least (Client::Impl::gathers_in_place).
  std::vector<StreamPlan> GatherPlans(Range elems, v1::DType wire) const;
  // The wire a push call's streams are planned for: int8 or its plain one.
  static v1::DType PlanWire(const PushCall& call) {
    return call.int8 != nullptr ? v1::DTYPE_INT8 : call.wire;
  }
  Ticket StartPush(const PushCall& call);
  Ticket StartGather(const GatherCall& call);

  // --- Failover of replicated jobs (client/failover.cc) ---
  // Runs fn(server) on the server that serves `shard`; for a job with
  // backups, when it fails because that server is gone, moves the shard to
  // the backup that takes it over (FailOver) and runs fn there.
  [[nodiscard]] absl::Status OnShard(int shard, absl::FunctionRef<absl::Status(int server)> fn);
  // Moves `shard` off server `from` (which failed with `cause`) unless it
  // still answers for it: to the first backup that answers as its primary,
  // then pushes this client's pushes of the step in progress again there
  // when that backup has not applied it. Errors: `cause` when `from` still
  // answers; ABORTED when the backup is behind the step in progress (it
  // missed acknowledged steps); UNAVAILABLE when no backup answers.
  [[nodiscard]] absl::Status FailOver(int shard, int from, const absl::Status& cause);
  // Sends `pushes` again, their parts in `shard` (to its server now).
  [[nodiscard]] absl::Status PushAgain(int shard, const std::vector<PushCall>& pushes);
  // Remembers a push of the step in progress (for FailOver).
  void Journal(const PushCall& call);
  // The job's StepRequest-style `shard` field: set when the job has backups.
  template <typename Request>
  void SetShard(Request& req, int shard) const {
    if (spec_.replicas() > 0) req.set_shard(shard);
  }

  const std::shared_ptr<Client::Impl> client_;
  const v1::JobSpec spec_;
  const Layout layout_;
  ByteBudget budget_;
  WireTally tally_;
  std::atomic<bool> pushes_held_{false};  // JobClient::SetPushesHeld
  const JobContext job_;
  ErrorFeedback feedback_;  // the int8 wire's (client/int8_push.h)
  // One part per call in flight, plus one held by this object until ~Impl.
  const std::shared_ptr<Ticket::State> calls_;
  absl::Mutex failover_mu_;  // one failover at a time
  absl::Mutex journal_mu_;
  uint64_t journal_step_ ABSL_GUARDED_BY(journal_mu_) = 0;
  std::vector<PushCall> journal_ ABSL_GUARDED_BY(journal_mu_);
};

}  // namespace zerostate::client
