// One range's gather of new weights, landed once: a module's parameters in
// zerostate.torch (python/zerostate/torch/weights.py), a bucket in
// zerostate-worker (worker/engine.cc). The slot keeps the bookkeeping both
// drivers share: which version is fetched, its ticket, whether it landed,
// when the buffer the gather writes may be written again, and the waits
// of other threads on a version's gather. The driver keeps the buffer, the
// node's all-gather and the copies into its parameters.
//
// The lifecycle:
//   idle --Fetch(v)--> fetched(v) --Land()--> landing(v) --Landed(reuse)--> idle
//   fetched(v) --Drop()--> idle
// Land() on an idle slot does nothing (returns false): a tied parameter's
// second holder, or a landing done already. Land() waits for the gather
// and returns true even when it failed: every local rank takes part in
// the node's all-gather, or its peers would wait for it; Landed() then
// returns the gather's error. Each other transition is refused with
// FAILED_PRECONDITION naming it and the slot's state, changing nothing:
// Fetch while fetched or landing, Land while landing, Landed while not
// landing, Drop while landing.
//
// The buffer's reuse: Landed(reuse) takes a wait that returns once the
// driver's copy out of the buffer is done (a CUDA event's synchronize);
// the next Fetch runs it before the gather writes the buffer again.
//
// A gather waits on the servers until its version is there; when the Step
// that was to bring it failed (the servers are alive and stay at the
// version before), nothing else ends it but its deadline and retries
// (minutes). So Drop() cancels the gather it forgets (Ticket::Cancel) and
// the driver's wait for the dropped ticket ends at once, and Cancel(why),
// from any thread, ends the gather fetched or landing while the slot keeps
// it (a coordinator whose Step failed: every local rank still lands and
// all-gathers, the gather's error CANCELLED).
//
// Version-tagged waits: WaitGathered(v), from any thread (the push thread:
// under the delayed update a push of a range waits until its blocks are at
// the version its gradients are for), waits for the gather in flight when
// it is of version v or later, returns at once when version v or later
// landed, and is ABORTED when none was fetched (dropped: the update that
// brings it failed). The ticket is waited outside the lock, so the driver
// goes on meanwhile.
//
// Thread safety: one driver thread makes the transitions (Fetch, Land,
// Landed, Drop); Cancel, WaitGathered and the accessors from any thread
// at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"

namespace zerostate::trainer {

class GatherSlot {
 public:
  // Starts the gather into the driver's buffer (JobClient::GatherAsync).
  using IssueFn = std::function<client::Ticket()>;
  // Returns once the buffer may be written again (OK), or why not.
  using ReuseFn = std::function<absl::Status()>;
  // While it returns true, Land() calls it again every 200 us until the
  // gather is done (zerostate-worker watches its Step in flight).
  using WatchFn = std::function<bool()>;

  // The slot of flat elements `range` (named in its errors).
  explicit GatherSlot(Range range) : range_(range) {}
  GatherSlot(const GatherSlot&) = delete;
  GatherSlot& operator=(const GatherSlot&) = delete;

  // Runs the reuse wait of the last landing (if any; its error is
  // returned, nothing issued), then `issue` (null: an empty share,
  // nothing to gather): version `version` is fetched.
  [[nodiscard]] absl::Status Fetch(uint64_t version, const IssueFn& issue)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Fetched: waits for the gather (watching with `watch`, if set), the
  // slot landing; true, the driver's part (all-gather, copies) follows,
  // then Landed(). Idle: false, nothing to do.
  [[nodiscard]] absl::StatusOr<bool> Land(const WatchFn& watch = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The driver's part is done: the version landed (unless its gather
  // failed), `reuse` (may be null) guards the buffer until the next Fetch.
  // Returns the gather's status.
  [[nodiscard]] absl::Status Landed(ReuseFn reuse) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the fetched gather (not landed), cancelling it, and which
  // version landed last. Returns its ticket (a completed one when idle),
  // for a driver that waits for it: at once, as cancelled, and then its
  // buffer is the driver's again.
  [[nodiscard]] absl::StatusOr<client::Ticket> Drop() ABSL_LOCKS_EXCLUDED(mu_);
  // No Step brings the version fetched (or landing): its gather ends now,
  // CANCELLED with `why` (Ticket::Cancel), and so do the waits on it; the
  // slot keeps it (Land returns true, Landed the CANCELLED status). Idle:
  // nothing.
  void Cancel(absl::string_view why) const ABSL_LOCKS_EXCLUDED(mu_);

  // See the top of this file.
  [[nodiscard]] absl::Status WaitGathered(uint64_t version) const ABSL_LOCKS_EXCLUDED(mu_);

  // Fetched or landing: the version, else nullopt.
  std::optional<uint64_t> pending() const ABSL_LOCKS_EXCLUDED(mu_);
  // The version that landed last (nullopt: none since creation or Drop).
  std::optional<uint64_t> landed() const ABSL_LOCKS_EXCLUDED(mu_);
  Range range() const { return range_; }

 private:
  enum class State { kIdle, kFetched, kLanding };
  // FAILED_PRECONDITION "gather slot [b, e): <what> while <state>".
  absl::Status Refuse(const std::string& what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Range range_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // fetched or landing
  client::Ticket ticket_ ABSL_GUARDED_BY(mu_);
  absl::Status gathered_ ABSL_GUARDED_BY(mu_);  // the landing gather's status
  std::optional<uint64_t> landed_ ABSL_GUARDED_BY(mu_);
  ReuseFn reuse_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::trainer
