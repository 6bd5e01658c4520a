// The zerostate_membership_* metrics (docs/metrics.md) of EtcdMembership.
// Thread-safe.
#pragma once

#include <memory>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace zerostate::server {

class MembershipMetrics {
 public:
  // Registers the metrics in `registry`; null: every call does nothing.
  explicit MembershipMetrics(std::shared_ptr<prometheus::Registry> registry);

  // Whether this server's lease is valid now (LeaseValid()).
  void SetLeaseValid(bool valid);
  // The wall-clock time a keepalive was sent that etcd then answered: the
  // latest moment this server is known to have reached etcd.
  void SetLeaseConfirmed(absl::Time sent);
  // One Claim answered: won (this server is now primary) or not (another
  // holds the shard), or one that failed (etcd unreachable, lease invalid).
  enum class Claim { kWon, kTaken, kFailed };
  void RecordClaim(Claim result);
  // Another server's primary claim vanished (OnPrimaryLost).
  void RecordPrimaryLost();
  // This server's own lease found expired (its claims void).
  void RecordLeaseLost();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* lease_valid_ = nullptr;
  prometheus::Gauge* lease_confirmed_ = nullptr;
  prometheus::Counter* claims_[3] = {nullptr, nullptr, nullptr};
  prometheus::Counter* primaries_lost_ = nullptr;
  prometheus::Counter* leases_lost_ = nullptr;
};

}  // namespace zerostate::server
