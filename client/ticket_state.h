// The shared state behind a Ticket: a count of pending parts and the first
// error. An async call adds one part per unit of work it starts (a stream,
// a server's RPC, a zero-copy payload slice that gRPC still holds) and each
// part reports Done once; the ticket completes when the count reaches zero.
// Thread-safe.
#pragma once

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/call_cancel.h"
#include "client/client.h"

namespace zerostate::client {

class Ticket::State {
 public:
  // Starts with `pending` parts outstanding; `on_done` (optional) runs once,
  // on the thread of the last Done, after the ticket completed.
  // REQUIRES: pending >= 1.
  explicit State(int pending, absl::AnyInvocable<void() &&> on_done = nullptr)
      : pending_(pending), on_done_(std::move(on_done)) {}

  // Adds `n` parts. REQUIRES: the ticket is not complete yet (some part is
  // still pending: the caller holds one).
  void Add(int n);

  // Marks one part done with `status`. The first non-OK status becomes the
  // ticket's status.
  void Done(const absl::Status& status);

  // Blocks until every part is done; returns the ticket's status.
  [[nodiscard]] absl::Status Wait();
  bool IsDone();
  // Waits until every part is done or `timeout` passed; returns IsDone().
  bool WaitFor(absl::Duration timeout);
  // What Ticket::Cancel cancels: the call's attempts register with it.
  CallCancel& cancel() { return cancel_; }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::AnyInvocable<void() &&> on_done_;  // taken by the last Done
  CallCancel cancel_;
};

// A ticket that is already complete with `status`.
Ticket CompletedTicket(absl::Status status);

}  // namespace zerostate::client
