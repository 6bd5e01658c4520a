// When a server may take a name another process holds in etcd (a
// replacement, zerostate-server --replace, or any start under a name whose
// member key names another address): only once that process's lease has
// lapsed in etcd. Never by revoking it: a process that is alive, or cut off
// from etcd, still acts on its lease until it lapses; once etcd dropped
// it, that process has fenced itself (EtcdMembership's fencing margin).
// A lapse is watched for a bounded time; a lease renewed meanwhile is a
// live process, and the start is refused naming it.
//
// Only the decision is here (no etcd): EtcdMembership polls the lease's
// time to live and asks Observe() after each reading.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace zerostate::server {

class LeaseLapse {
 public:
  enum class Verdict {
    kWait,       // read again later
    kLapsed,     // etcd dropped the lease: the name is free
    kKeptAlive,  // renewed while watched: its process is alive
    kTooLong,    // would not lapse (or did not) within the wait
  };

  // etcd drops an expired lease up to this long after its TTL runs out
  // (its expiry check runs every 500 ms, then goes through raft).
  static constexpr absl::Duration kExpirySlack = absl::Seconds(1);

  // `wait`: how long the lapse is watched for (>= 0).
  explicit LeaseLapse(absl::Duration wait) : wait_(wait) {}

  // One reading of the lease: whole seconds left, rounded down as etcd
  // gives them (-1: gone), `elapsed` after the first reading. Renewal
  // shows as more seconds left than the previous reading, or as the lease
  // outliving the time it had left at the first reading (a renewal between
  // readings, where the rounding hides the rise).
  Verdict Observe(int64_t seconds_left, absl::Duration elapsed);

  // Why the start is refused after kKeptAlive or kTooLong: `name` (the
  // member key's server) held by the process dialled at `holder` on lease
  // `lease`.
  std::string Refusal(const std::string& name, const std::string& holder, int64_t lease) const;

 private:
  const absl::Duration wait_;
  int64_t first_ = -2;  // seconds left at the first reading; -2: none yet
  int64_t last_ = -2;   // at the latest
  Verdict verdict_ = Verdict::kWait;
};

}  // namespace zerostate::server
