// Cancelling one call in flight (Ticket::Cancel): a gather waiting on a
// server for a version that will not come (the Step that was to bring it
// failed) ends at once instead of waiting out its deadline and retries.
// Each attempt of the call registers how to interrupt what it blocks on
// while it runs (OnCancel: shutting its data-plane socket down, cancelling
// its gRPC context); Cancel runs those and makes every later attempt
// refuse to start (Check). A socket shut down is never given back to a
// connection pool: the attempt that held it drops it, as after any break.
// Thread-safe.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::client {

class CallCancel {
 public:
  // An interrupt registered by OnCancel, unregistered when destroyed or
  // Reset (after which it never runs: a descriptor it names may then be
  // closed and reused).
  class Registration {
   public:
    Registration() = default;
    Registration(CallCancel* cancel, uint64_t id) : cancel_(cancel), id_(id) {}
    Registration(Registration&& other) noexcept { *this = std::move(other); }
    Registration& operator=(Registration&& other) noexcept;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration() { Reset(); }
    void Reset();

   private:
    CallCancel* cancel_ = nullptr;
    uint64_t id_ = 0;
  };

  // Cancels the call: CANCELLED with `why` from now on (a code no retry
  // takes up); the first Cancel counts, later ones do nothing. Runs every
  // interrupt registered now, under the lock (each must be quick and never
  // call back in: shutdown(), grpc::ClientContext::TryCancel()).
  void Cancel(absl::string_view why) ABSL_LOCKS_EXCLUDED(mu_);
  // OK, or CANCELLED with Cancel's `why` once cancelled.
  [[nodiscard]] absl::Status Check() const ABSL_LOCKS_EXCLUDED(mu_);
  // `status` unless the call was cancelled, then Cancel's `why`: an
  // attempt that failed because it was interrupted reports the cancel,
  // which is not retried, rather than the broken connection it saw.
  [[nodiscard]] absl::Status Explain(absl::Status status) const ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `interrupt` when the call is cancelled while the registration
  // lives (at once, before returning, if it already is).
  [[nodiscard]] Registration OnCancel(absl::AnyInvocable<void()> interrupt)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Unregister(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, absl::AnyInvocable<void()>> interrupts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::client
