// Pushes in order on a thread of their own. Each order first runs its
// waits (the device-to-host copy of its buffer, the gathers of the version
// its blocks must reach first), then issues its push without waiting for
// it (JobClient::PushAsync: the client's streams carry it); Drain() waits
// for every order and every push. A driver's backward hands a bucket on
// and goes on computing: the waits happen here, not on its thread (and,
// for zerostate.torch, not under Python's GIL).
//
// Errors: an order whose wait fails is not pushed; Drain() returns the
// first error of the orders since the last Drain, naming its order.
//
// Thread safety: Submit and Drain from any thread at once.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
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

  // Queues `order` behind those submitted before it.
  // REQUIRES: order.issue is set.
  void Submit(PushOrder order) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until every order submitted so far has run and each push it
  // issued is done. Returns the first error since the last Drain, its
  // message prefixed with its order's `what`; OK otherwise.
  [[nodiscard]] absl::Status Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // The same, the failed order's `what` in *what (unchanged when OK) and
  // the error's message as its push or wait gave it.
  [[nodiscard]] absl::Status Drain(std::string* what) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // An order's waits and push; records its ticket or error.
  void Execute(PushOrder& order) ABSL_LOCKS_EXCLUDED(mu_);
  void Record(std::string what, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<PushOrder> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // an order is out of the queue, not done
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<std::string, client::Ticket>> pushes_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // the first failed wait's
  std::string error_what_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace zerostate::trainer
