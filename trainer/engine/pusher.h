// Pushes in order on a thread of their own. Each order first runs its
// waits (the device-to-host copy of its buffer, the gathers of the version
// its blocks must reach first), then issues its push without waiting for
// it (JobClient::PushAsync: the client's streams carry it); Drain waits
// for the orders and their pushes. A driver's backward hands a bucket on
// and goes on computing: the waits happen here, not on its thread (and,
// for zerostate.torch, not under Python's GIL).
//
// Marks: the orders are numbered as submitted; a mark is the number of
// orders submitted at some point (Submit returns the one through its
// order, Mark() the current one). Drain(mark) waits only for the orders
// before it and consumes only their errors, so a step's pushes can be
// drained (by the delayed update's Step thread) while the next step's are
// queued behind them; WaitThrough(mark) waits without consuming (before a
// buffer an order reads is written again).
//
// Errors: an order whose wait fails is not pushed; Drain returns the first
// error, in submission order, of the orders before its mark not drained
// before, naming its order. Each error is returned once.
//
// Thread safety: every method from any thread at once.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"

namespace zerostate::trainer {

struct PushOrder {
  // Names the push in an error, e.g. "push of step 3 [0, 1024)".
  std::string what;
  // Run in order on the push thread before the push; the first that
  // fails ends the order (no push).
  std::vector<std::function<absl::Status()>> waits;
  // Starts the push (JobClient::PushAsync); its ticket is waited by Drain.
  std::function<client::Ticket()> issue;
};

// "push of step <step> [<begin>, <end>)".
std::string PushName(uint64_t step, Range elems);

class Pusher {
 public:
  Pusher();
  // Waits for every order and push; their errors are dropped.
  ~Pusher();
  Pusher(const Pusher&) = delete;
  Pusher& operator=(const Pusher&) = delete;

  // Queues `order` behind those submitted before it. Returns the mark
  // through it (Mark() right after).
  // REQUIRES: order.issue is set.
  uint64_t Submit(PushOrder order) ABSL_LOCKS_EXCLUDED(mu_);
  // The number of orders submitted so far.
  uint64_t Mark() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until each order before `mark` has run and each push it issued
  // is done (orders after it are left running, their errors kept).
  // Returns the first error of those orders not drained before, its
  // message prefixed with its order's `what`; OK otherwise. Errors:
  // INVALID_ARGUMENT when `mark` is past Mark() (nothing waited for).
  [[nodiscard]] absl::Status Drain(uint64_t mark) ABSL_LOCKS_EXCLUDED(mu_);
  // The same, the failed order's `what` in *what (unchanged when OK) and
  // the error's message as its push or wait gave it.
  [[nodiscard]] absl::Status Drain(uint64_t mark, std::string* what) ABSL_LOCKS_EXCLUDED(mu_);
  // Drain(Mark()): every order submitted so far.
  [[nodiscard]] absl::Status Drain() ABSL_LOCKS_EXCLUDED(mu_);

  // Waits as Drain(mark) does, consuming no error. Errors: as Drain's.
  [[nodiscard]] absl::Status WaitThrough(uint64_t mark) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether WaitThrough(mark) would return at once (never blocks on a
  // push). False for a mark past Mark().
  bool DoneThrough(uint64_t mark) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // An order that ran: its push's ticket, or its wait's error.
  struct Ran {
    std::string what;
    client::Ticket ticket;
    absl::Status error;  // the failed wait's (then no push)
    bool done = false;   // the Drain that claimed it waited for it: it may go
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // An order's waits and push; records what it did.
  void Execute(PushOrder& order) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the orders before `mark` ran; copies into *ran those of
  // them still recorded (from order *first on; the ones gone were waited
  // for). With `claim`, the unclaimed ones among them, [*claimed, mark),
  // become the caller's to report and to Release. Errors: as Drain's.
  absl::Status Settle(uint64_t mark, bool claim, std::vector<Ran>* ran, uint64_t* first,
                      uint64_t* claimed) ABSL_LOCKS_EXCLUDED(mu_);
  // Orders [begin, end), claimed and waited for, are done; the done ones
  // at the front go.
  void Release(uint64_t begin, uint64_t end) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::deque<PushOrder> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ran_count_ ABSL_GUARDED_BY(mu_) = 0;  // orders that ran (in order)
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // The orders that ran and are not gone yet: ran_[i] is order first_ran_ + i.
  std::deque<Ran> ran_ ABSL_GUARDED_BY(mu_);
  uint64_t first_ran_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t claimed_ ABSL_GUARDED_BY(mu_) = 0;  // orders before it are a Drain's to report
  std::thread thread_;                         // last: starts once the rest is built
};

}  // namespace zerostate::trainer
