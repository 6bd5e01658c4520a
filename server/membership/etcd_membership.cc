#include "server/membership/etcd_membership.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace zerostate::server {
namespace {

using etcdserverpb::Compare;
using etcdserverpb::KeyValue;
using etcdserverpb::TxnRequest;

// Monotonic nanoseconds: fencing must not trust a wall clock that jumps.
int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status CheckOptions(const EtcdMembershipOptions& o) {
  if (o.endpoints.empty()) return absl::InvalidArgumentError("etcd_endpoints: no endpoint given");
  if (o.cluster.empty() || o.cluster.size() > 128 ||
      !std::all_of(o.cluster.begin(), o.cluster.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
               c == '-';
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster: '", o.cluster, "' must be 1 to 128 of [A-Za-z0-9._-]"));
  }
  if (o.self.empty() || o.self.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("advertised address '", o.self, "' must be non-empty, without '/'"));
  }
  if (o.dial.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("dialled address '", o.dial, "' of ", o.self, " must not have '/'"));
  }
  if (o.lease_ttl_seconds < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd_lease_ttl_seconds: ", o.lease_ttl_seconds,
                     " is below 2, etcd's shortest lease with its default election timeout"));
  }
  return absl::OkStatus();
}

}  // namespace

EtcdMembership::EtcdMembership(EtcdMembershipOptions options, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)),
      prefix_(absl::StrCat("/zerostate/", options_.cluster, "/")),
      margin_(absl::Seconds(options_.lease_ttl_seconds) / 4),
      etcd_(std::move(etcd)),
      metrics_(std::make_unique<MembershipMetrics>(options_.metrics)) {}

absl::StatusOr<std::unique_ptr<EtcdMembership>> EtcdMembership::Start(
    EtcdMembershipOptions options) {
  if (auto st = CheckOptions(options); !st.ok()) return st;
  if (options.dial.empty()) options.dial = options.self;
  if (options.call_timeout <= absl::ZeroDuration()) {
    options.call_timeout = absl::Seconds(options.lease_ttl_seconds) / 3;
  }
  auto etcd = EtcdClient::Create({options.endpoints, options.call_timeout});
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<EtcdMembership> m(new EtcdMembership(std::move(options), *std::move(etcd)));
  if (auto st = m->Join(); !st.ok()) return st;
  m->keepalive_ = std::thread([p = m.get()] { p->KeepAliveLoop(); });
  m->watcher_ = std::thread([p = m.get()] { p->WatchLoop(); });
  return m;
}

EtcdMembership::~EtcdMembership() { Leave(); }

void EtcdMembership::Leave() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    if (watch_ != nullptr) watch_->Cancel();
  }
  if (keepalive_.joinable()) keepalive_.join();
  if (watcher_.joinable()) watcher_.join();
  // Fenced before the lease goes: nothing here acts as primary once
  // another server can claim.
  valid_until_ns_ = 0;
  metrics_->SetLeaseValid(false);
  int64_t lease = lease_id();
  if (lease == 0) return;
  if (auto st = etcd_->LeaseRevoke(lease); !st.ok() && !absl::IsNotFound(st)) {
    Log(absl::StrCat("could not revoke lease ", lease,
                     " (its primaries stay held until it expires): ", st.ToString()));
  }
}

std::string EtcdMembership::PrimaryKey(const std::string& job, int shard) const {
  return absl::StrCat(prefix_, "primaries/", job, "/", shard);
}

std::string EtcdMembership::BehindPrefix(const std::string& job, int shard) const {
  return absl::StrCat(prefix_, "behind/", job, "/", shard, "/");
}

std::string EtcdMembership::MemberKey() const { return MemberKeyOf(options_.self); }

std::string EtcdMembership::MemberKeyOf(const std::string& name) const {
  return absl::StrCat(prefix_, "members/", name);
}

absl::Status EtcdMembership::ReplacePreviousIncarnation() {
  int64_t previous;
  {
    absl::MutexLock lock(&mu_);
    previous = std::exchange(previous_lease_, 0);
  }
  if (previous == 0) return absl::OkStatus();
  Log(absl::StrCat("revoking lease ", previous, " of this address's previous process"));
  auto st = etcd_->LeaseRevoke(previous);
  return absl::IsNotFound(st) ? absl::OkStatus() : st;
}

void EtcdMembership::Log(const std::string& what) const {
  std::cerr << absl::StrCat("zerostate-server: membership (", options_.self, "): ", what, "\n")
            << std::flush;
}

int64_t EtcdMembership::lease_id() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

absl::Status EtcdMembership::Join() {
  const int64_t sent_ns = SteadyNowNs();
  auto grant = etcd_->LeaseGrant(options_.lease_ttl_seconds);
  if (!grant.ok()) return grant.status();
  const int64_t lease = grant->id();
  auto old = etcd_->Range(MemberKey());
  if (!old.ok()) return old.status();
  int64_t previous = 0;
  for (const KeyValue& kv : old->kvs()) {
    if (kv.lease() != 0 && kv.lease() != lease) previous = kv.lease();
  }
  if (auto put = etcd_->Put(MemberKey(), options_.dial, lease); !put.ok()) return put.status();
  {
    absl::MutexLock lock(&mu_);
    lease_ = lease;
    ttl_seconds_ = grant->ttl();
    held_.clear();
    if (previous != 0) previous_lease_ = previous;
  }
  Confirm(sent_ns, grant->ttl());
  return absl::OkStatus();
}

void EtcdMembership::Confirm(int64_t sent_ns, int64_t ttl) {
  int64_t until = sent_ns + absl::ToInt64Nanoseconds(absl::Seconds(ttl) - margin_);
  // Never moves back: an older keepalive's late answer confirms less.
  int64_t now = valid_until_ns_.load();
  bool later = false;
  while (until > now && !(later = valid_until_ns_.compare_exchange_weak(now, until))) {
  }
  if (later) {
    metrics_->SetLeaseConfirmed(absl::Now() - absl::Nanoseconds(SteadyNowNs() - sent_ns));
  }
  metrics_->SetLeaseValid(LeaseValid());
}

bool EtcdMembership::LeaseValid() const { return SteadyNowNs() < valid_until_ns_.load(); }

bool EtcdMembership::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
}

void EtcdMembership::KeepAliveLoop() {
  bool failing = false;
  while (true) {
    int64_t lease, ttl;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      lease = lease_;
      ttl = ttl_seconds_;
    }
    const absl::Duration interval = absl::Seconds(ttl) / 3;
    const absl::Time start = absl::Now();
    const int64_t sent_ns = SteadyNowNs();
    auto renewed = etcd_->KeepAliveOnce(lease, interval);
    if (renewed.ok() && *renewed > 0) {
      Confirm(sent_ns, std::min(*renewed, ttl));
      if (failing) {
        Log(absl::StrCat("etcd answers again (lease ", lease, " kept)"));
        // Deletions may have been missed on a connection that hung: read
        // primaries/ afresh.
        absl::MutexLock lock(&mu_);
        if (watch_ != nullptr) watch_->Cancel();
      }
      failing = false;
    } else if (renewed.ok()) {
      Log(absl::StrCat("lease ", lease,
                       " expired in etcd; every claim under it is void, joining again"));
      metrics_->RecordLeaseLost();
      valid_until_ns_ = 0;
      {
        absl::MutexLock lock(&mu_);
        held_.clear();
      }
      auto st = Join();
      failing = !st.ok();
      if (!st.ok()) Log(st.ToString());
    } else {
      if (!failing) Log(renewed.status().ToString());
      failing = true;
    }
    metrics_->SetLeaseValid(LeaseValid());
    if (!Pause(std::max(absl::ZeroDuration(), start + interval - absl::Now()))) return;
  }
}

absl::Status EtcdMembership::CheckShard(const std::string& job, int shard) const {
  if (auto st = ValidateJobId(job); !st.ok()) return st;
  if (shard < 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard: ", shard, " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PrimaryTerm> EtcdMembership::Primary(const std::string& job, int shard) {
  if (auto st = CheckShard(job, shard); !st.ok()) return st;
  const std::string key = PrimaryKey(job, shard);
  auto got = etcd_->Range(key);
  if (!got.ok()) return got.status();
  if (got->kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat("no live primary of job '", job, "' shard ", shard,
                                            " (etcd key '", key, "')"));
  }
  return PrimaryTerm{got->kvs(0).value(), got->kvs(0).create_revision()};
}

absl::StatusOr<PrimaryTerm> EtcdMembership::Claim(const std::string& job, int shard) {
  if (auto st = CheckShard(job, shard); !st.ok()) return st;
  const std::string key = PrimaryKey(job, shard);
  if (!LeaseValid()) {
    metrics_->RecordClaim(MembershipMetrics::Claim::kFailed);
    return absl::FailedPreconditionError(absl::StrCat("claim of job '", job, "' shard ", shard,
                                                      ": this server's etcd lease is not confirmed "
                                                      "(etcd at ",
                                                      etcd_->endpoint(),
                                                      " has not answered a keepalive in time)"));
  }
  const int64_t lease = lease_id();
  TxnRequest txn;
  Compare* absent = txn.add_compare();
  absent->set_key(key);
  absent->set_target(Compare::CREATE);
  absent->set_result(Compare::EQUAL);
  absent->set_create_revision(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(options_.self);
  put->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(key);
  auto resp = etcd_->Txn(txn, key);
  if (!resp.ok()) {
    metrics_->RecordClaim(MembershipMetrics::Claim::kFailed);
    if (!absl::IsNotFound(resp.status())) return resp.status();
    // etcd no longer has the lease (expired before a keepalive told us):
    // not "no primary", which is what NOT_FOUND means elsewhere here.
    return absl::FailedPreconditionError(absl::StrCat(
        "claim of job '", job, "' shard ", shard, ": this server's lease ", lease,
        " has expired in etcd (", resp.status().message(), "); it joins again on a new one"));
  }
  PrimaryTerm term;
  bool mine;
  if (resp->succeeded()) {
    term = {options_.self, resp->header().revision()};
    mine = true;
  } else {
    const auto& kvs = resp->responses(0).response_range().kvs();
    if (kvs.empty()) {  // cannot happen: the compare and the range are one transaction
      metrics_->RecordClaim(MembershipMetrics::Claim::kFailed);
      return absl::InternalError(absl::StrCat("etcd: Txn '", key, "' found the key and not"));
    }
    term = {kvs[0].value(), kvs[0].create_revision()};
    mine = kvs[0].lease() == lease;  // a claim of ours whose answer was lost, retried
  }
  if (mine) {
    absl::MutexLock lock(&mu_);
    if (lease_ == lease) held_[ShardKey(job, shard)] = term.epoch;
  }
  metrics_->RecordClaim(mine ? MembershipMetrics::Claim::kWon : MembershipMetrics::Claim::kTaken);
  return term;
}

absl::Status EtcdMembership::Release(const std::string& job, int shard) {
  if (auto st = CheckShard(job, shard); !st.ok()) return st;
  const std::string key = PrimaryKey(job, shard);
  const int64_t lease = lease_id();
  {
    absl::MutexLock lock(&mu_);
    held_.erase(ShardKey(job, shard));  // void from now, whatever etcd answers
  }
  TxnRequest txn;
  Compare* ours = txn.add_compare();
  ours->set_key(key);
  ours->set_target(Compare::LEASE);
  ours->set_result(Compare::EQUAL);
  ours->set_lease(lease);
  txn.add_success()->mutable_request_delete_range()->set_key(key);
  // The shard's behind/ records go with the claim (its job was deleted).
  auto* records = txn.add_success()->mutable_request_delete_range();
  records->set_key(BehindPrefix(job, shard));
  records->set_range_end(PrefixEnd(BehindPrefix(job, shard)));
  auto resp = etcd_->Txn(txn, key);
  return resp.ok() ? absl::OkStatus() : resp.status();
}

absl::Status EtcdMembership::SetBehind(const std::string& job, int shard, const PrimaryTerm& term,
                                       const std::string& copy, bool behind) {
  if (auto st = CheckShard(job, shard); !st.ok()) return st;
  if (copy.empty() || copy.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy: '", copy, "' is not a server's address (empty, or has '/')"));
  }
  const std::string claim = PrimaryKey(job, shard);
  const std::string record = BehindPrefix(job, shard) + copy;
  TxnRequest txn;
  Compare* in_force = txn.add_compare();
  in_force->set_key(claim);
  in_force->set_target(Compare::CREATE);
  in_force->set_result(Compare::EQUAL);
  in_force->set_create_revision(term.epoch);
  if (behind) {
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(record);
    put->set_value(absl::StrCat(term.epoch));
  } else {
    txn.add_success()->mutable_request_delete_range()->set_key(record);
  }
  auto resp = etcd_->Txn(txn, claim);
  if (!resp.ok()) return resp.status();
  if (!resp->succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "recording copy ", copy, " of job '", job, "' shard ", shard,
        (behind ? " behind" : " in sync"), ": the claim of epoch ", term.epoch, " by ",
        term.primary,
        " is no longer in force in etcd; only the shard's primary records its copies"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> EtcdMembership::Behind(const std::string& job, int shard) {
  if (auto st = CheckShard(job, shard); !st.ok()) return st;
  const std::string prefix = BehindPrefix(job, shard);
  auto got = etcd_->Range(prefix, PrefixEnd(prefix));
  if (!got.ok()) return got.status();
  std::vector<std::string> out;
  for (const KeyValue& kv : got->kvs()) out.push_back(kv.key().substr(prefix.size()));
  std::sort(out.begin(), out.end());
  return out;
}

bool EtcdMembership::Holds(const std::string& job, int shard, const PrimaryTerm& term) const {
  if (term.primary != options_.self || !LeaseValid()) return false;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(ShardKey(job, shard));
  return it != held_.end() && it->second == term.epoch;
}

absl::StatusOr<std::string> EtcdMembership::Resolve(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("server name '", name, "' is not a server's address (empty, or has '/')"));
  }
  auto got = etcd_->Range(MemberKeyOf(name));
  if (!got.ok()) return got.status();
  if (got->kvs().empty() || got->kvs(0).value().empty()) return name;
  return got->kvs(0).value();
}

absl::StatusOr<std::vector<std::string>> EtcdMembership::Members() {
  const std::string prefix = MemberKeyOf("");
  auto got = etcd_->Range(prefix, PrefixEnd(prefix));
  if (!got.ok()) return got.status();
  std::vector<std::string> out;
  for (const KeyValue& kv : got->kvs()) out.push_back(kv.key().substr(prefix.size()));
  std::sort(out.begin(), out.end());
  return out;
}

void EtcdMembership::OnPrimaryLost(std::function<void(const std::string& job, int shard)> cb) {
  absl::MutexLock lock(&mu_);
  on_lost_ = std::move(cb);
}

bool EtcdMembership::ParsePrimaryKey(const std::string& key, ShardKey* out) const {
  const std::string prefix = absl::StrCat(prefix_, "primaries/");
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  size_t slash = key.rfind('/');
  if (slash < prefix.size()) return false;
  out->first = key.substr(prefix.size(), slash - prefix.size());
  return absl::SimpleAtoi(key.substr(slash + 1), &out->second) && !out->first.empty();
}

void EtcdMembership::Lost(const std::string& key, const KeyValue& prev) {
  ShardKey shard;
  if (!ParsePrimaryKey(key, &shard)) return;
  std::function<void(const std::string&, int)> cb;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(shard);
    if (it != held_.end() && it->second == prev.create_revision()) held_.erase(it);
    cb = on_lost_;
  }
  if (prev.value() == options_.self) return;  // our own claim, of this lease or a lost one
  metrics_->RecordPrimaryLost();
  if (cb) cb(shard.first, shard.second);
}

void EtcdMembership::WatchLoop() {
  absl::Status last = absl::OkStatus();
  while (true) {
    absl::Status st = WatchOnce();
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    if (!st.ok() && !absl::IsCancelled(st) && st.ToString() != last.ToString()) {
      Log(absl::StrCat("watch: ", st.ToString()));
    }
    last = st;
    if (!Pause(absl::Milliseconds(absl::IsCancelled(st) ? 0 : 200))) return;
  }
}

absl::Status EtcdMembership::WatchOnce() {
  const std::string prefix = absl::StrCat(prefix_, "primaries/");
  auto snapshot = etcd_->Range(prefix, PrefixEnd(prefix));
  if (!snapshot.ok()) return snapshot.status();
  // What vanished while no watch ran (a reconnect, a hung connection).
  absl::flat_hash_map<std::string, KeyValue> now;
  for (const KeyValue& kv : snapshot->kvs()) now[kv.key()] = kv;
  for (const auto& [key, kv] : known_) {
    if (!now.contains(key)) Lost(key, kv);
  }
  known_ = std::move(now);
  auto watch = etcd_->Watch(prefix, snapshot->header().revision() + 1);
  if (!watch.ok()) return watch.status();
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("stopping");
    watch_ = watch->get();
  }
  absl::Status st;
  while (true) {
    auto batch = (*watch)->Next();
    if (!batch.ok()) {
      st = batch.status();
      break;
    }
    for (const etcdserverpb::Event& ev : batch->events()) {
      if (ev.type() == etcdserverpb::Event::PUT) {
        known_[ev.kv().key()] = ev.kv();
        continue;
      }
      auto it = known_.find(ev.kv().key());
      KeyValue prev = ev.has_prev_kv()     ? ev.prev_kv()
                      : it != known_.end() ? it->second
                                           : KeyValue();
      if (it != known_.end()) known_.erase(it);
      Lost(ev.kv().key(), prev);
    }
  }
  absl::MutexLock lock(&mu_);
  watch_ = nullptr;
  return st;
}

}  // namespace zerostate::server
