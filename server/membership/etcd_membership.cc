#include "server/membership/etcd_membership.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "server/membership/lease_lapse.h"

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
  if (o.replace_wait_seconds < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("replace_wait_seconds: ", o.replace_wait_seconds,
                     " is below 0 (-1: twice the lease TTL)"));
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
  if (auto st = m->Join(/*first=*/true); !st.ok()) return st;
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

std::string EtcdMembership::NameKey() const {
  return absl::StrCat(prefix_, "names/", options_.self);
}

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

std::string EtcdMembership::fenced() const {
  absl::MutexLock lock(&mu_);
  return fenced_;
}

absl::Status EtcdMembership::Join(bool first) {
  if (joining_lease_ != 0) {  // its member key, if put, goes with it
    auto st = etcd_->LeaseRevoke(std::exchange(joining_lease_, 0));
    if (!st.ok() && !absl::IsNotFound(st)) return st;
  }
  auto held = etcd_->Range(MemberKey());
  if (!held.ok()) return held.status();
  int64_t previous = 0;  // this address's previous process's lease
  int64_t expected_mod = 0;  // the member key as read (0: absent)
  if (!held->kvs().empty()) {
    const KeyValue& holder = held->kvs(0);
    if (!first) return Fence(holder);
    if (holder.value() == options_.dial) {
      previous = holder.lease();
      expected_mod = holder.mod_revision();
    } else if (auto st = AwaitLapse(holder); !st.ok()) {
      return st;
    }
  } else if (first && options_.dial != options_.self) {
    auto record = etcd_->Range(NameKey());
    if (!record.ok()) return record.status();
    if (record->kvs().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replace: '", options_.self, "' was never a member of cluster '", options_.cluster,
          "' (etcd has no ", NameKey(), "): nothing to replace; check the name, or start the "
          "server without --replace"));
    }
  }
  const int64_t sent_ns = SteadyNowNs();
  auto grant = etcd_->LeaseGrant(options_.lease_ttl_seconds);
  if (!grant.ok()) return grant.status();
  const int64_t lease = grant->id();
  TxnRequest txn;
  Compare* as_read = txn.add_compare();
  as_read->set_key(MemberKey());
  as_read->set_target(Compare::MOD);
  as_read->set_result(Compare::EQUAL);
  as_read->set_mod_revision(expected_mod);
  auto* member = txn.add_success()->mutable_request_put();
  member->set_key(MemberKey());
  member->set_value(options_.dial);
  member->set_lease(lease);
  auto* name = txn.add_success()->mutable_request_put();
  name->set_key(NameKey());
  name->set_value(options_.dial);
  txn.add_failure()->mutable_request_range()->set_key(MemberKey());
  auto put = etcd_->Txn(txn, MemberKey());
  if (!put.ok()) {
    joining_lease_ = lease;
    return put.status();
  }
  if (!put->succeeded()) {
    if (auto st = etcd_->LeaseRevoke(lease); !st.ok()) joining_lease_ = lease;
    const auto& kvs = put->responses(0).response_range().kvs();
    if (!first && !kvs.empty()) return Fence(kvs[0]);
    return absl::FailedPreconditionError(absl::StrCat(
        "joining as ", options_.self, ": its member key changed since it was read (",
        kvs.empty() ? "now gone"
                    : absl::StrCat("now dialled at ", kvs[0].value(), ", lease ", kvs[0].lease()),
        "): another process joined under this name meanwhile, or etcd had not yet dropped a "
        "lapsed lease; start again"));
  }
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

absl::Status EtcdMembership::AwaitLapse(const KeyValue& holder) {
  const int64_t wait_s = options_.replace_wait_seconds >= 0 ? options_.replace_wait_seconds
                                                             : 2 * options_.lease_ttl_seconds;
  LeaseLapse lapse(absl::Seconds(wait_s));
  Log(absl::StrCat("held by the process at ", holder.value(), " (lease ", holder.lease(),
                   "): waiting up to ", wait_s, " s for its lease to lapse"));
  const absl::Time start = absl::Now();
  while (true) {
    auto left = etcd_->LeaseTimeToLive(holder.lease());
    if (!left.ok()) return left.status();
    switch (lapse.Observe(*left, absl::Now() - start)) {
      case LeaseLapse::Verdict::kLapsed:
        Log(absl::StrCat("lease ", holder.lease(), " lapsed; taking the name"));
        return absl::OkStatus();
      case LeaseLapse::Verdict::kWait:
        absl::SleepFor(absl::Milliseconds(200));
        break;
      default:
        return absl::FailedPreconditionError(
            absl::StrCat(options_.dial != options_.self ? "replace: " : "",
                         lapse.Refusal(options_.self, holder.value(), holder.lease())));
    }
  }
}

absl::Status EtcdMembership::Fence(const KeyValue& holder) {
  const std::string why = absl::StrCat(
      "this server's name ", options_.self, " is held by the process at ", holder.value(),
      " (lease ", holder.lease(), ") since this one's lease was lost: fenced for good");
  valid_until_ns_ = 0;
  {
    absl::MutexLock lock(&mu_);
    held_.clear();
    fenced_ = why;
  }
  metrics_->SetLeaseValid(false);
  return absl::FailedPreconditionError(why);
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
      auto st = Join(/*first=*/false);
      failing = !st.ok();
      if (std::string why = fenced(); !why.empty()) {
        if (options_.on_fenced) {
          options_.on_fenced(why);
        } else {
          Log(why);
        }
        return;  // never joins again: another process has the name
      }
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
    if (std::string why = fenced(); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("claim of job '", job, "' shard ", shard, ": ", why));
    }
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
