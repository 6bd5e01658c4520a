// A keyed all-gather of small values among `world` ranks: workers use it
// to exchange NCCL unique ids and as a barrier, through the state service
// itself rather than a new component. Thread-safe.
//
// What a key costs is bounded per owner (the service passes the caller's
// token hash): an owner that holds a job on this server has a large quota,
// any other a small one, and owners without a job together have a third.
// Keys whose calls have all returned (finished, or abandoned at their
// deadline) are "idle": kept so that a retry is answered the same, dropped
// after `idle_linger`, and dropped first, oldest first, to make room for
// a new key of the same owner (or, between owners without a job, of any).
// A key is never dropped while a call waits on it, and one owner's keys
// never take another's room, except among owners without a job, whose
// shared quota their idle keys are evicted from.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
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
  // names it), UNAVAILABLE (shutting down).
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
    std::string owner;
    bool guest = false;
    uint32_t world = 0;
    absl::flat_hash_map<uint32_t, std::string> values;  // by rank
    size_t bytes = 0;
    int waiters = 0;
    uint64_t idle_seq = 0;  // its place in the idle indexes; 0: busy
    absl::Time idle_since;
  };
  struct Owner {
    size_t keys = 0;
    size_t bytes = 0;
    absl::btree_map<uint64_t, std::string> idle;  // idle_seq -> entry id
  };
  using Entries = absl::node_hash_map<std::string, Entry>;

  // The entry `id` of `owner`, created if missing once there is room.
  [[nodiscard]] absl::StatusOr<Entries::iterator> FindOrCreateLocked(const RendezvousOwner& owner,
                                                                     const std::string& id,
                                                                     uint32_t world)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops idle entries until `extra` more bytes (and `new_key`: a key) fit
  // the quotas of `owner`; RESOURCE_EXHAUSTED naming the quota otherwise.
  [[nodiscard]] absl::Status MakeRoomLocked(const RendezvousOwner& owner, size_t extra,
                                            bool new_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChargeLocked(Entry& e, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkIdleLocked(const std::string& id, Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkBusyLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops entries idle for longer than idle_linger.
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells options_.on_usage.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RendezvousOptions options_;
  mutable absl::Mutex mu_;
  // node_hash_map: waiters hold references to entries across rehashes.
  Entries entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<uint64_t, std::string> idle_ ABSL_GUARDED_BY(mu_);        // every owner
  absl::btree_map<uint64_t, std::string> guest_idle_ ABSL_GUARDED_BY(mu_);  // owners with no job
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t guest_keys_ ABSL_GUARDED_BY(mu_) = 0;
  size_t guest_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zerostate::server
