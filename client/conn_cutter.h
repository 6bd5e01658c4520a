// The data-plane connections open to one server, cut all at once when the
// server stops answering its gRPC channel's keepalive pings
// (client/channel_watch.h): a hung server (stopped, or wedged) keeps its
// sockets open and its kernel acknowledges every byte, so a push waiting
// for its acknowledgement, or a gather for its version, would otherwise
// wait out its whole call deadline. Cut shuts each socket down, so that
// its blocked reads and writes fail at once, and refuses new connections
// until Restore (the server answers its channel again); the calls then go
// the way of a server that is gone (retries, then failover).
// Thread-safe.
#pragma once

#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zerostate::client {

class ConnCutter {
 public:
  // Shuts down every tracked socket and refuses new connections, with
  // `why` (names the server and what it failed to answer).
  void Cut(const std::string& why);
  // Lets new connections be made again.
  void Restore();
  // OK, or UNAVAILABLE with Cut's `why` while cut.
  [[nodiscard]] absl::Status Check() const;
  // When the cut in force began; nullopt while not cut.
  std::optional<absl::Time> CutSince() const;

  // `fd` is a connection's open socket until Untrack (called before it is
  // closed, so that Cut never shuts down a descriptor reused since).
  // A socket tracked while cut is shut down at once.
  void Track(int fd);
  void Untrack(int fd);

 private:
  mutable absl::Mutex mu_;
  std::string cut_ ABSL_GUARDED_BY(mu_);  // "" while not cut
  absl::Time cut_at_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int> fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::client
