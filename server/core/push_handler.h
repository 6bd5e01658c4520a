// The server's one push path, which both edges call: the gRPC edge for each
// chunk of a PushGradients stream (server/rpc/state_service.cc), the data
// plane for each PUSH frame (server/dataplane/data_session.cc). It
// authorizes the job a chunk names and finds the copy of it that holds the
// chunk's block (routing.h: a backed-up shard only when served as
// primary), gives the push its wait deadline (a margin before the caller's,
// answer_deadline.h), receives a payload in place where it may, waits for
// staging memory, and folds (JobPushes::Push). The edges only read their
// bytes and write their answers.
// Thread-safe: const, and the registry and jobs are.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chunk_view.h"
#include "server/core/job.h"
#include "server/core/job_registry.h"
#include "server/core/metrics.h"
#include "server/core/primaries.h"

namespace zerostate::server {

class PushHandler {
 public:
  // `jobs` and `primaries` (null: no shard is served as a backup's
  // primary) must outlive the handler, as `metrics` (null: none; the
  // zerostate_wire_* series of each push applied). `max_wait` caps every
  // wait (a caller without a deadline waits that long at most).
  PushHandler(JobRegistry& jobs, Primaries* primaries, absl::Duration max_wait,
              ServerMetrics* metrics = nullptr)
      : jobs_(jobs), primaries_(primaries), max_wait_(max_wait), metrics_(metrics) {}

  // Where a push's payload is when Begin is called.
  enum class Payload {
    // In memory already (a gRPC chunk's received slices): Apply folds it.
    kReceived,
    // Not read yet (a PUSH frame's): Begin claims the block's sum for it
    // when it may be received in place (JobPushes::ClaimPush: node 0, fp32, the
    // step in progress, not received before); otherwise, before the edge
    // takes a buffer for it, waits (no lock held) while the push would only
    // wait for staging memory (JobPushes::AwaitStagingRoom).
    kToRead,
  };

  // One chunk being pushed. Movable; the job outlives the claim.
  class Push {
   public:
    // Where to receive the payload in place (the claim on the block's
    // sum), or null: the payload goes into memory of the edge's own and to
    // Apply.
    void* in_place() const { return claim_.data(); }

    Push() = default;
    Push(Push&&) = default;
    // The claim goes before the job it points into, as in the destructor.
    Push& operator=(Push&& other) noexcept {
      claim_ = std::move(other.claim_);
      job_ = std::move(other.job_);
      deadline_ = other.deadline_;
      return *this;
    }

   private:
    friend class PushHandler;
    // Destroyed in reverse order: the claim before the job it points into.
    std::shared_ptr<Job> job_;
    PushClaim claim_;
    absl::Time deadline_ = absl::InfinitePast();
  };

  // Begins a push of `fields` with `data_bytes` of payload from a caller
  // holding `token`, which gives up at `caller_deadline`
  // (absl::InfiniteFuture(): never). `stream_job` (may be null) caches the
  // copy of a stream's previous push: a push naming the same job and a
  // block of that copy is not authorized again. Errors: those of
  // CopyForBlock only; a bad chunk is Apply's to refuse.
  [[nodiscard]] absl::StatusOr<Push> Begin(const ChunkFields& fields, const std::string& token,
                                           size_t data_bytes, absl::Time caller_deadline,
                                           Payload payload,
                                           std::shared_ptr<Job>* stream_job = nullptr) const;

  // The copy of job `job_id` that holds `block`, if `token` is the job's
  // token (CopyForBlock; `serve` false: without the primary's check, for
  // InitWeights, which writes every copy), unless `*stream_job` (may be
  // null) already is that copy; then stored in `*stream_job`. For a stream
  // of chunks, whose job is authorized once per copy.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Job>> JobFor(const std::string& job_id,
                                                            const std::string& token,
                                                            uint64_t block, bool serve,
                                                            std::shared_ptr<Job>* stream_job) const;

  // Applies the push: commits its claim (in_place() not null, the payload
  // is there), or else folds `chunk`. A chunk that needs staging memory the
  // budget lacks waits for it up to the push's deadline when `may_wait`;
  // otherwise it fails at once with JobPushes::IsStagingWait, and the edge may
  // Apply it again with may_wait where waiting is allowed. Errors: those
  // of JobPushes::Push and PushClaim::Commit.
  [[nodiscard]] absl::StatusOr<PushOutcome> Apply(Push& push, const ChunkView& chunk,
                                                  bool may_wait) const;

 private:
  JobRegistry& jobs_;
  Primaries* const primaries_;
  const absl::Duration max_wait_;
  ServerMetrics* const metrics_;
};

}  // namespace zerostate::server
