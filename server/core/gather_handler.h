// The server's one gather path, which both edges call: the gRPC edge for a
// Gather stream (server/rpc/state_service.cc), the data plane for a GATHER
// frame (server/dataplane/data_session.cc). It authorizes the job, finds
// the copy that holds the range (routing.h), checks
// the request, gives the gather its wait deadline (a margin before the
// caller's, answer_deadline.h) and serves it piece by piece into the
// edge's sink (GatherSink), which only frames and sends the pieces.
// Thread-safe: const, and the registry and jobs are.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/job.h"
#include "server/core/job_registry.h"
#include "server/core/metrics.h"
#include "server/core/primaries.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

class GatherHandler {
 public:
  // `jobs` and `primaries` (null: no shard is served as a backup's
  // primary) must outlive the handler. `max_wait` caps the wait (a caller
  // without a deadline waits that long at most); `piece_elems` is the most
  // elements of one piece.
  // `metrics` (null: none) gets the zerostate_wire_* series of each gather
  // served, and must outlive the handler.
  GatherHandler(JobRegistry& jobs, Primaries* primaries, absl::Duration max_wait,
                uint32_t piece_elems, ServerMetrics* metrics = nullptr)
      : jobs_(jobs),
        primaries_(primaries),
        max_wait_(max_wait),
        piece_elems_(piece_elems),
        metrics_(metrics) {}

  // One gather, checked and ready to serve.
  struct Gather {
    std::shared_ptr<Job> job;
    v1::GatherRequest request;
    Range range;                          // the elements it covers (JobGathers::CheckGather)
    uint64_t bytes = 0;                   // its payload (GatherBytes)
    absl::Time deadline = absl::InfinitePast();  // of the wait for the version
  };

  // Authorizes `token` for req.job_id() and checks the request, for a
  // caller that gives up at `caller_deadline` (absl::InfiniteFuture():
  // never). Errors: those of CopyForGather and JobGathers::CheckGather.
  [[nodiscard]] absl::StatusOr<Gather> Begin(const v1::GatherRequest& req, const std::string& token,
                                             absl::Time caller_deadline) const;

  // Serves `gather` into `sink` (JobGathers::Gather), each piece once its block
  // reaches the requested version, counted in zerostate_gathers_in_progress
  // meanwhile. Errors: those of JobGathers::Gather (CANCELLED once
  // sink.Cancelled() says the caller went away during a wait).
  [[nodiscard]] absl::Status Serve(const Gather& gather, GatherSink& sink) const;

 private:
  JobRegistry& jobs_;
  Primaries* const primaries_;
  const absl::Duration max_wait_;
  const uint32_t piece_elems_;
  ServerMetrics* const metrics_;
};

}  // namespace zerostate::server
