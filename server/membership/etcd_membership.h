// Membership over etcd: etcd decides, through leases and
// revisions; this class only keeps them.
//
// Keys, under /zerostate/<cluster>/:
//   members/<self>            value the address this process is dialled
//                             at (Options::dial: self, or the new address
//                             of a replacement), on this server's lease
//   primaries/<job>/<shard>   value the primary's self, on its lease,
//                             created by a Txn that succeeds only when the
//                             key does not exist (create_revision == 0);
//                             its create revision is the term's epoch.
//   names/<self>              value the address it was last dialled at, on
//                             no lease: the record that <self> was ever a
//                             member, which a replacement (--replace)
//                             needs to find
//   behind/<job>/<shard>/<copy>  value the epoch of the primary that
//                             recorded copy `copy` behind (SetBehind), on no
//                             lease (it outlives the primary); written and
//                             deleted only in a Txn that finds the writer's
//                             claim in force (the claim key's create
//                             revision is its epoch); deleted with the claim
//                             when the holder releases it (its job deleted).
// When a lease expires (its server died, or was cut off from etcd for a
// TTL) or is revoked (the server stopped cleanly), etcd deletes its keys,
// and every other member's watch of primaries/ sees the deletions:
// OnPrimaryLost. Epochs are etcd revisions, so a later claim always has a
// larger one.
//
// Fencing: a keepalive is sent every TTL/3; one answered confirms the
// lease until (the time it was SENT) + TTL - TTL/4. etcd renews the lease to
// TTL from when it RECEIVES the keepalive, later than it was sent, so
// LeaseValid() turns false at least TTL/4 before etcd can expire the lease
// and let another server claim the shard; the margin is the time a primary
// may take between checking LeaseValid() and acting on it.
//
// A lease found gone (etcd answered a keepalive with TTL 0) is not
// revived: a new lease is granted and the member key put again, and every
// claim made under the old one is void (Holds() says false), since etcd
// deleted those keys and another server may hold them now.
//
// A member key of this name dialled at this same address on another
// lease, found at start, is this server's previous process (killed):
// ReplacePreviousIncarnation(), called once this process holds the address
// (its port bound), revokes
// that lease, so its claims go at once rather than a TTL later, and their
// backups hear of it.
//
// One process per name: the member key is put only by a Txn that finds it
// as read (absent, or this address's previous process's). A member key
// that names another address (a replacement's, or the process a
// replacement replaces) is never revoked: Start waits, up to
// replace_wait_seconds, for its lease to lapse in etcd (lease_lapse.h), and
// refuses to start, naming the live process, if it is renewed or outlasts
// the wait. A member whose lease was lost (hung, partitioned) and that finds
// its name held by another process when it joins again is fenced for good:
// LeaseValid() stays false, it claims nothing, and on_fenced says why.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/membership/etcd_client.h"
#include "server/membership/membership.h"
#include "server/membership/membership_metrics.h"

namespace zerostate::server {

struct EtcdMembershipOptions {
  // --etcd_endpoints, one entry each ("host:port" or "http://host:port").
  std::vector<std::string> endpoints;
  // --cluster: servers with the same name form one cluster (the key prefix
  // /zerostate/<cluster>/). 1-128 of [A-Za-z0-9._-].
  std::string cluster = "default";
  // This server's advertised address (Membership::self()). Required, no '/'.
  std::string self;
  // The gRPC address this process is dialled at, published in its member
  // key for Resolve(self); empty: self. It differs from self for a
  // replacement of server `self` that listens elsewhere (--replace).
  std::string dial;
  // --etcd_lease_ttl_seconds: how long etcd keeps this server's lease (and
  // so its primaries) after its last keepalive. Whole seconds, >= 2 (etcd's
  // own minimum with its default election timeout). Failover takes about
  // this long after a crash.
  int64_t lease_ttl_seconds = 10;
  // Deadline of each call to etcd; 0: a third of the TTL.
  absl::Duration call_timeout = absl::ZeroDuration();
  // --replace_wait_seconds: how long Start waits for the lease of another
  // process that holds `self` (member key dialled elsewhere) to lapse
  // before it refuses; -1: twice lease_ttl_seconds.
  int64_t replace_wait_seconds = -1;
  // Called once, from a membership thread, when this member finds its name
  // held by another process as it joins again after losing its lease: it
  // is fenced for good (`why` names the holder). Empty: only logged.
  std::function<void(const std::string& why)> on_fenced;
  // Where the zerostate_membership_* metrics go; null: nowhere.
  std::shared_ptr<prometheus::Registry> metrics;
};

class EtcdMembership final : public Membership {
 public:
  // Checks the options (INVALID_ARGUMENT naming the field), grants a lease
  // and puts the member key (UNAVAILABLE naming the endpoint when etcd does
  // not answer within the call timeout, on every endpoint), then starts
  // the keepalive and watch threads. A replacement (dial != self) of a
  // name etcd never had a member of: INVALID_ARGUMENT. A name held by
  // another address's process whose lease does not lapse within
  // replace_wait_seconds: FAILED_PRECONDITION naming it. Either leaves
  // etcd as it was.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdMembership>> Start(
      EtcdMembershipOptions options);

  // Leave().
  ~EtcdMembership() override;

  // Leaves the cluster: stops the threads, turns LeaseValid() false for
  // good (Claim then fails, Holds is false), and revokes the lease (bounded
  // by the call timeout), so that this server's primaries and member key
  // go at once rather than a TTL later. Primary() and Members() still
  // answer. Idempotent. REQUIRES: not called from an OnPrimaryLost callback.
  void Leave();

  const std::string& self() const override { return options_.self; }
  [[nodiscard]] absl::StatusOr<PrimaryTerm> Primary(const std::string& job, int shard) override;
  [[nodiscard]] absl::StatusOr<PrimaryTerm> Claim(const std::string& job, int shard) override;
  bool LeaseValid() const override;
  // Deletes the key only if it is on this server's current lease (a Txn
  // comparing its lease), so it never removes another server's claim.
  [[nodiscard]] absl::Status Release(const std::string& job, int shard) override;
  [[nodiscard]] absl::Status SetBehind(const std::string& job, int shard, const PrimaryTerm& term,
                                       const std::string& copy, bool behind) override;
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Behind(const std::string& job,
                                                                int shard) override;
  // The value of members/<name> (the live process's dialled address),
  // `name` when none is live.
  [[nodiscard]] absl::StatusOr<std::string> Resolve(const std::string& name) override;
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Members() override;
  void OnPrimaryLost(std::function<void(const std::string& job, int shard)> cb) override;

  // Revokes the lease of the previous process of this name and address,
  // if Start found one. REQUIRES: this process has bound its dialled
  // address (proof that the other is gone). A process of this name at
  // another address is never revoked: Start waited for its lease to lapse.
  // Errors: UNAVAILABLE (etcd).
  [[nodiscard]] absl::Status ReplacePreviousIncarnation();

  // Whether `term` is this server's claim under its current lease, and
  // that lease valid: what a primary checks before acting as one.
  bool Holds(const std::string& job, int shard, const PrimaryTerm& term) const override;

  // The lease this server holds now (it changes when one is lost).
  int64_t lease_id() const;
  // Why this member is fenced for good (its name taken while its lease
  // was lost); empty while it is not.
  std::string fenced() const;
  // The key of (job, shard)'s primary and of this server's member entry.
  std::string PrimaryKey(const std::string& job, int shard) const;
  // The prefix of (job, shard)'s behind/ keys (SetBehind).
  std::string BehindPrefix(const std::string& job, int shard) const;
  std::string MemberKey() const;
  // The key recording that `self` was ever a member (no lease).
  std::string NameKey() const;
  // The member key of server `name`.
  std::string MemberKeyOf(const std::string& name) const;

 private:
  using ShardKey = std::pair<std::string, int>;
  explicit EtcdMembership(EtcdMembershipOptions options, std::unique_ptr<EtcdClient> etcd);
  // Grants a lease and puts the member key on it (noting a previous
  // incarnation's lease); then LeaseValid() holds. `first`: at Start (a
  // name held elsewhere is waited for); else after a lost lease (a name
  // held elsewhere fences this member for good).
  [[nodiscard]] absl::Status Join(bool first);
  // Waits for the lease of `holder` (the member key of self, dialled
  // elsewhere) to lapse; FAILED_PRECONDITION (LeaseLapse::Refusal) if it
  // does not.
  [[nodiscard]] absl::Status AwaitLapse(const etcdserverpb::KeyValue& holder);
  // Fences this member for good: `holder` (the member key of self) is
  // another process's. Returns the FAILED_PRECONDITION that says so.
  absl::Status Fence(const etcdserverpb::KeyValue& holder);
  // Records a keepalive sent at `sent_ns` (steady clock) that etcd
  // answered with `ttl` seconds.
  void Confirm(int64_t sent_ns, int64_t ttl);
  void KeepAliveLoop();
  void WatchLoop();
  // One watch of primaries/ from a fresh read of it, until it fails.
  [[nodiscard]] absl::Status WatchOnce();
  // A primary key deleted: forget the claim if it was ours, else tell the
  // callback.
  void Lost(const std::string& key, const etcdserverpb::KeyValue& prev);
  // Waits up to `d`, or until Stop; false when stopping.
  bool Pause(absl::Duration d);
  // One line on stderr, naming this server.
  void Log(const std::string& what) const;
  [[nodiscard]] absl::Status CheckShard(const std::string& job, int shard) const;
  // (job, shard) of a key under primaries/, false when it is not one.
  bool ParsePrimaryKey(const std::string& key, ShardKey* out) const;

  const EtcdMembershipOptions options_;
  const std::string prefix_;  // /zerostate/<cluster>/
  const absl::Duration margin_;
  const std::unique_ptr<EtcdClient> etcd_;
  const std::unique_ptr<MembershipMetrics> metrics_;
  // Until when the lease is known valid (steady clock nanoseconds), read
  // by LeaseValid() without a lock.
  std::atomic<int64_t> valid_until_ns_{0};

  mutable absl::Mutex mu_;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ttl_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // as granted
  int64_t previous_lease_ ABSL_GUARDED_BY(mu_) = 0;  // ReplacePreviousIncarnation's
  std::string fenced_ ABSL_GUARDED_BY(mu_);           // fenced(); empty: not
  // A lease granted by a Join whose Txn's outcome is unknown (etcd did not
  // answer): revoked by the next Join, which may find its member key.
  // Start's and the keepalive thread's only, one after the other.
  int64_t joining_lease_ = 0;
  // This server's claims under lease_: (job, shard) -> epoch.
  absl::flat_hash_map<ShardKey, int64_t> held_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&, int)> on_lost_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  EtcdWatch* watch_ ABSL_GUARDED_BY(mu_) = nullptr;  // the one WatchOnce reads, to cancel
  // The primaries/ keys as the watch last saw them. Watcher thread only.
  absl::flat_hash_map<std::string, etcdserverpb::KeyValue> known_;
  std::thread keepalive_;
  std::thread watcher_;
};

}  // namespace zerostate::server
