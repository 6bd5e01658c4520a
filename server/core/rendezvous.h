// A keyed all-gather of small values among `world` ranks: workers use it
// to exchange NCCL unique ids and as a barrier, through the state service
// itself rather than a new component. Thread-safe.
//
// What a key costs is bounded per owner (the service passes the caller's
// token hash): an owner that holds a job on this server has a large quota,
// any other a small one, and owners without a job ("jobless": workers that
// meet before rank 0 registered the job, or anyone with a made-up token)
// together have a third, the jobless pool.
// Keys whose calls have all returned (finished, or abandoned at their
// deadline) are "idle": kept so that a retry is answered the same, dropped
// after `idle_linger`, and dropped first, oldest first, to make room for
// a new key of the same owner (or, in the jobless pool, of any).
//
// One owner never blocks another. An owner at its own quota is refused
// (RESOURCE_EXHAUSTED); a jobless pool full of keys with waiting calls
// never refuses a newcomer: it drops the key with the fewest ranks in it
// (oldest first among equals), whose waiting calls get UNAVAILABLE, which
// clients retry (client/retry.h). Tokens cost nothing, so no rule can tell
// a real run's key from a made-up one; this one makes a key's safety cost
// what it holds, one call per rank, and a dropped run's retry takes its
// room back. A key of an owner that holds a job is never dropped for
// another owner, and a jobless key becomes one when a caller whose token
// now holds a job joins it (rank 0 after registering): so a run's start
// rendezvous completes however many tokens fill the pool. Memory stays
// within the quotas: a dropped key's values are freed at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zerostate::server {

// Keys and bytes (keys, values, and a fixed overhead per key and value).
struct RendezvousQuota {
  size_t keys = 0;
  size_t bytes = 0;
};

// What the table holds: keys and their bytes, all owners and those that
// hold no job.
struct RendezvousUsage {
  size_t keys = 0;
  size_t bytes = 0;
  size_t jobless_keys = 0;
  size_t jobless_bytes = 0;
};

struct RendezvousOptions {
  // One owner that holds a job on this server.
  RendezvousQuota job{65536, 256u << 20};
  // One owner that holds none (e.g. workers before rank 0 registered).
  RendezvousQuota guest{1024, 4u << 20};
  // All owners that hold none, together.
  RendezvousQuota guests{8192, 64u << 20};
  // How long an idle key is kept for a retry.
  absl::Duration idle_linger = absl::Minutes(10);
  // Called (under the table's lock: keep it short) with the usage after
  // each call changed it; null: not told.
  std::function<void(const RendezvousUsage&)> on_usage;
};

// Who calls: the token hash, and whether it holds a job here.
struct RendezvousOwner {
  std::string id;
  bool holds_job = false;
};

class RendezvousTable {
 public:
  static constexpr size_t kMaxValueBytes = 4096;
  static constexpr uint32_t kMaxWorld = 65536;
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kKeyOverheadBytes = 128;
  static constexpr size_t kValueOverheadBytes = 64;

  // INVALID_ARGUMENT naming the server flag unless one token with no job
  // may hold a key and all of them together at least one token's quota.
  [[nodiscard]] static absl::Status Check(const RendezvousOptions& options);

  explicit RendezvousTable(RendezvousOptions options = RendezvousOptions());

  // Deposits `value` for `rank` under (owner, ns, key) and waits until all
  // `world` ranks have; returns their values indexed by rank. A retry with
  // the same value is answered the same while the key is kept (above).
  // Memory grows with the ranks that called, not with `world`. Errors:
  // INVALID_ARGUMENT (rank, world, a key or value too large, a world or
  // value that differs from an earlier call; never echoes a value),
  // DEADLINE_EXCEEDED (names the missing ranks, up to 16),
  // RESOURCE_EXHAUSTED (the owner's keys with waiting calls fill its quota;
  // names it), UNAVAILABLE (shutting down; or the key was dropped from a
  // full jobless pool: retry).
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Join(
      const RendezvousOwner& owner, const std::string& ns, const std::string& key, uint32_t rank,
      uint32_t world, const std::string& value, absl::Time deadline);

  // Keys held and their bytes, all owners together.
  size_t keys() const;
  size_t bytes() const;

  // Wakes every waiting call with UNAVAILABLE and refuses new ones.
  void Shutdown();

 private:
  struct Entry {
    std::string id;
    std::string owner;
    bool guest = false;  // counted in the jobless pool
    uint32_t world = 0;
    absl::flat_hash_map<uint32_t, std::string> values;  // by rank
    size_t bytes = 0;
    int waiters = 0;
    uint64_t seq = 0;       // creation order
    uint64_t idle_seq = 0;  // its place in the idle indexes; 0: busy
    absl::Time idle_since;
    bool victim = false;      // in guest_victims_, as (victim_ranks, seq, id)
    size_t victim_ranks = 0;
    bool dropped = false;  // dropped while calls waited on it
    bool complete() const { return values.size() == world; }
  };
  struct Owner {
    size_t keys = 0;
    size_t bytes = 0;
    absl::btree_map<uint64_t, std::string> idle;  // idle_seq -> entry id
  };
  // Waiting calls hold their entry, which may be dropped meanwhile.
  using Entries = absl::flat_hash_map<std::string, std::shared_ptr<Entry>>;
  // Busy, incomplete jobless keys by (ranks in it, creation order): the
  // order in which a full jobless pool drops them.
  using Victim = std::tuple<size_t, uint64_t, std::string>;

  // The entry `id` of `owner`, created if missing once there is room.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Entry>> FindOrCreateLocked(
      const RendezvousOwner& owner, const std::string& id, uint32_t world)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops idle entries (and, in the jobless pool, busy ones other than
  // `keep`) until `extra` more bytes (and `new_key`: a key) fit the quotas
  // of `owner`; RESOURCE_EXHAUSTED naming the owner's quota otherwise.
  [[nodiscard]] absl::Status MakeRoomLocked(const RendezvousOwner& owner, size_t extra,
                                            bool new_key, const Entry* keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChargeLocked(Entry& e, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkIdleLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkBusyLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a jobless key to its owner's job quota.
  void PromoteLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts `e` in guest_victims_ (or takes it out) as its state says.
  void PlaceVictimLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `id`; calls waiting on it wake up with UNAVAILABLE.
  void EraseLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops entries idle for longer than idle_linger.
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells options_.on_usage.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RendezvousOptions options_;
  mutable absl::Mutex mu_;
  Entries entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, std::string> idle_ ABSL_GUARDED_BY(mu_);        // every owner
  absl::btree_map<uint64_t, std::string> guest_idle_ ABSL_GUARDED_BY(mu_);  // jobless pool
  absl::btree_set<Victim> guest_victims_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t guest_keys_ ABSL_GUARDED_BY(mu_) = 0;
  size_t guest_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zerostate::server
