#include "server/membership/membership_metrics.h"

#include <utility>

namespace zerostate::server {

MembershipMetrics::MembershipMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  if (!registry_) return;
  lease_valid_ = &prometheus::BuildGauge()
                      .Name("zerostate_membership_lease_valid")
                      .Help(
                          "1 while this server's etcd lease is confirmed (it may act as "
                          "primary), 0 once a keepalive is overdue (fenced)")
                      .Register(*registry_)
                      .Add({});
  lease_confirmed_ = &prometheus::BuildGauge()
                          .Name("zerostate_membership_lease_confirmed_timestamp_seconds")
                          .Help(
                              "Unix time at which this server sent the last keepalive etcd "
                              "answered: when it last reached etcd for sure")
                          .Register(*registry_)
                          .Add({});
  auto& claims = prometheus::BuildCounter()
                     .Name("zerostate_membership_claims_total")
                     .Help(
                         "Claims of a shard's primary: won, taken (another server holds it), "
                         "failed (etcd unreachable or lease not valid)")
                     .Register(*registry_);
  claims_[0] = &claims.Add({{"result", "won"}});
  claims_[1] = &claims.Add({{"result", "taken"}});
  claims_[2] = &claims.Add({{"result", "failed"}});
  primaries_lost_ = &prometheus::BuildCounter()
                         .Name("zerostate_membership_primaries_lost_total")
                         .Help(
                             "Other servers' primary claims that vanished (lease expired or "
                             "revoked), each one reported to the replication layer")
                         .Register(*registry_)
                         .Add({});
  leases_lost_ = &prometheus::BuildCounter()
                      .Name("zerostate_membership_leases_lost_total")
                      .Help(
                          "Times this server found its own etcd lease expired, and with it "
                          "every claim it held")
                      .Register(*registry_)
                      .Add({});
}

void MembershipMetrics::SetLeaseValid(bool valid) {
  if (lease_valid_) lease_valid_->Set(valid ? 1 : 0);
}

void MembershipMetrics::SetLeaseConfirmed(absl::Time sent) {
  if (lease_confirmed_) lease_confirmed_->Set(absl::ToDoubleSeconds(sent - absl::UnixEpoch()));
}

void MembershipMetrics::RecordClaim(Claim result) {
  if (auto* c = claims_[static_cast<int>(result)]) c->Increment();
}

void MembershipMetrics::RecordPrimaryLost() {
  if (primaries_lost_) primaries_lost_->Increment();
}

void MembershipMetrics::RecordLeaseLost() {
  if (leases_lost_) leases_lost_->Increment();
}

}  // namespace zerostate::server
