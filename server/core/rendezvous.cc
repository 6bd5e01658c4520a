#include "server/core/rendezvous.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerostate::server {
namespace {

absl::Status CheckArgs(const std::string& ns, const std::string& key, uint32_t rank,
                       uint32_t world, const std::string& value) {
  if (world == 0 || world > RendezvousTable::kMaxWorld) {
    return absl::InvalidArgumentError(
        absl::StrCat("world: ", world, " must be in [1, ", RendezvousTable::kMaxWorld, "]"));
  }
  if (rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", rank, " is not below world ", world));
  }
  if (ns.size() > RendezvousTable::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("job_id: ", ns.size(), " bytes exceed ",
                                                   RendezvousTable::kMaxKeyBytes));
  }
  if (key.size() > RendezvousTable::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key: ", key.size(), " bytes exceed ",
                                                   RendezvousTable::kMaxKeyBytes));
  }
  if (value.size() > RendezvousTable::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value: ", value.size(), " bytes exceed ",
                                                   RendezvousTable::kMaxValueBytes));
  }
  return absl::OkStatus();
}

std::string MissingRanks(const absl::flat_hash_map<uint32_t, std::string>& values,
                         uint32_t world) {
  constexpr size_t kNamed = 16;
  std::vector<uint32_t> missing;
  size_t count = 0;
  for (uint32_t r = 0; r < world; ++r) {
    if (values.contains(r)) continue;
    if (++count <= kNamed) missing.push_back(r);
  }
  std::string text = absl::StrCat("ranks [", absl::StrJoin(missing, ", "));
  if (count > kNamed) absl::StrAppend(&text, ", ... (", count, " in all)");
  return absl::StrCat(text, "]");
}

std::string QuotaText(const char* whose, const RendezvousQuota& q) {
  return absl::StrCat(whose, " of ", q.keys, " keys and ", q.bytes, " bytes");
}

}  // namespace

absl::Status RendezvousTable::Check(const RendezvousOptions& options) {
  if (options.guest.keys < 1) {
    return absl::InvalidArgumentError(
        "jobless_rendezvous_keys_per_token: 0 keys; a token with no job must be able to meet");
  }
  if (options.guests.keys < options.guest.keys || options.guests.bytes < options.guest.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "jobless_rendezvous_keys: ", options.guests.keys,
        " keys is less than one token's quota (--jobless_rendezvous_keys_per_token=",
        options.guest.keys, ")"));
  }
  return absl::OkStatus();
}

RendezvousTable::RendezvousTable(RendezvousOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::vector<std::string>> RendezvousTable::Join(
    const RendezvousOwner& owner, const std::string& ns, const std::string& key, uint32_t rank,
    uint32_t world, const std::string& value, absl::Time deadline) {
  if (auto s = CheckArgs(ns, key, rank, world, value); !s.ok()) return s;
  std::string id = absl::StrCat(owner.id.size(), ":", owner.id, ns.size(), ":", ns, key);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  SweepLocked(absl::Now());
  auto found = FindOrCreateLocked(owner, id, world);
  if (!found.ok()) {
    PublishLocked();
    return found.status();
  }
  // Held while this call waits: the entry may be dropped meanwhile.
  std::shared_ptr<Entry> entry = *std::move(found);
  Entry& e = *entry;
  if (owner.holds_job && e.guest) PromoteLocked(e);
  if (e.world != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("world: ", world, " differs from ", e.world, " given by an earlier rank"));
  }
  auto present = e.values.find(rank);
  if (present != e.values.end() && present->second != value) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: rank ", rank, " joined this key before with another value"));
  }
  if (e.waiters++ == 0) MarkBusyLocked(e);
  if (present == e.values.end()) {
    size_t extra = value.size() + kValueOverheadBytes;
    if (auto s = MakeRoomLocked(owner, extra, false, &e); !s.ok()) {
      if (--e.waiters == 0) MarkIdleLocked(e);
      PublishLocked();
      return s;
    }
    e.values.emplace(rank, value);
    ChargeLocked(e, extra);
  }
  PlaceVictimLocked(e);
  PublishLocked();
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutting_down_ || e.dropped || e.complete();
  };
  bool ok = mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  --e.waiters;
  if (!e.dropped) {
    if (e.waiters == 0) MarkIdleLocked(e);
    PlaceVictimLocked(e);
  }
  PublishLocked();
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  if (e.dropped) {
    return absl::UnavailableError(absl::StrCat(
        "rendezvous '", key, "': dropped to make room for another token's key (",
        QuotaText("the keys of tokens with no job on this server", options_.guests),
        " are full); retry, or register the job first"));
  }
  if (!ok) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous '", key, "': ", MissingRanks(e.values, e.world), " did not arrive in time"));
  }
  std::vector<std::string> values(e.world);
  for (const auto& [r, v] : e.values) values[r] = v;
  return values;
}

absl::StatusOr<std::shared_ptr<RendezvousTable::Entry>> RendezvousTable::FindOrCreateLocked(
    const RendezvousOwner& owner, const std::string& id, uint32_t world) {
  auto it = entries_.find(id);
  if (it != entries_.end()) return it->second;
  // The entry to create is not there yet, so it cannot be dropped here.
  if (auto s = MakeRoomLocked(owner, id.size() + kKeyOverheadBytes, true, nullptr); !s.ok()) {
    return s;
  }
  auto e = std::make_shared<Entry>();
  e->id = id;
  e->owner = owner.id;
  e->guest = !owner.holds_job;
  e->world = world;
  e->seq = ++next_seq_;
  entries_.emplace(id, e);
  ++owners_[owner.id].keys;
  if (e->guest) ++guest_keys_;
  ChargeLocked(*e, id.size() + kKeyOverheadBytes);
  return e;
}

absl::Status RendezvousTable::MakeRoomLocked(const RendezvousOwner& owner, size_t extra,
                                             bool new_key, const Entry* keep) {
  const RendezvousQuota& mine = owner.holds_job ? options_.job : options_.guest;
  auto owner_full = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto o = owners_.find(owner.id);
    size_t keys = o == owners_.end() ? 0 : o->second.keys;
    size_t bytes = o == owners_.end() ? 0 : o->second.bytes;
    return keys + (new_key ? 1 : 0) > mine.keys || bytes + extra > mine.bytes;
  };
  while (owner_full()) {
    auto o = owners_.find(owner.id);
    if (o == owners_.end() || o->second.idle.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rendezvous: this token's keys with waiting calls fill its quota (",
          QuotaText(owner.holds_job ? "a token with a job on this server" : "a token with no job",
                    mine),
          ")"));
    }
    EraseLocked(o->second.idle.begin()->second);
  }
  if (owner.holds_job) return absl::OkStatus();
  auto guests_full = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return guest_keys_ + (new_key ? 1 : 0) > options_.guests.keys ||
           guest_bytes_ + extra > options_.guests.bytes;
  };
  while (guests_full()) {
    if (!guest_idle_.empty()) {
      EraseLocked(guest_idle_.begin()->second);
      continue;
    }
    // Every jobless key has waiting calls: drop the cheapest one, never
    // refuse the newcomer. `keep` (the caller's own key) stays.
    auto victim = guest_victims_.begin();
    if (victim != guest_victims_.end() && keep != nullptr && std::get<2>(*victim) == keep->id) {
      ++victim;
    }
    if (victim == guest_victims_.end()) {
      // Only complete keys whose calls are leaving: not reached while the
      // pool holds at least one owner's quota (Check).
      return absl::UnavailableError(absl::StrCat(
          "rendezvous: ", QuotaText("the keys of tokens with no job on this server", options_.guests),
          " are full; retry, or register the job first"));
    }
    EraseLocked(std::string(std::get<2>(*victim)));
  }
  return absl::OkStatus();
}

void RendezvousTable::ChargeLocked(Entry& e, size_t bytes) {
  e.bytes += bytes;
  owners_[e.owner].bytes += bytes;
  bytes_ += bytes;
  if (e.guest) guest_bytes_ += bytes;
}

void RendezvousTable::MarkIdleLocked(Entry& e) {
  e.idle_seq = ++next_seq_;
  e.idle_since = absl::Now();
  owners_[e.owner].idle.emplace(e.idle_seq, e.id);
  idle_.emplace(e.idle_seq, e.id);
  if (e.guest) guest_idle_.emplace(e.idle_seq, e.id);
}

void RendezvousTable::MarkBusyLocked(Entry& e) {
  if (e.idle_seq == 0) return;
  owners_[e.owner].idle.erase(e.idle_seq);
  idle_.erase(e.idle_seq);
  guest_idle_.erase(e.idle_seq);
  e.idle_seq = 0;
}

void RendezvousTable::PromoteLocked(Entry& e) {
  guest_idle_.erase(e.idle_seq);
  --guest_keys_;
  guest_bytes_ -= e.bytes;
  e.guest = false;
  PlaceVictimLocked(e);
}

void RendezvousTable::PlaceVictimLocked(Entry& e) {
  if (e.victim) {
    guest_victims_.erase(Victim(e.victim_ranks, e.seq, e.id));
    e.victim = false;
  }
  if (e.guest && !e.dropped && e.waiters > 0 && !e.complete()) {
    e.victim_ranks = e.values.size();
    guest_victims_.emplace(e.victim_ranks, e.seq, e.id);
    e.victim = true;
  }
}

void RendezvousTable::EraseLocked(const std::string& id) {
  auto it = entries_.find(id);
  std::shared_ptr<Entry> held = it->second;
  Entry& e = *held;
  MarkBusyLocked(e);
  if (e.victim) {
    guest_victims_.erase(Victim(e.victim_ranks, e.seq, e.id));
    e.victim = false;
  }
  auto o = owners_.find(e.owner);
  --o->second.keys;
  o->second.bytes -= e.bytes;
  if (o->second.keys == 0) owners_.erase(o);
  bytes_ -= e.bytes;
  if (e.guest) {
    --guest_keys_;
    guest_bytes_ -= e.bytes;
  }
  entries_.erase(it);
  if (e.waiters > 0) {
    // Its waiting calls wake up (the condition they wait on) and answer
    // UNAVAILABLE; its values go now.
    e.dropped = true;
    e.values = {};
  }
}

void RendezvousTable::SweepLocked(absl::Time now) {
  while (!idle_.empty()) {
    const std::string& id = idle_.begin()->second;
    if (now - entries_.find(id)->second->idle_since < options_.idle_linger) return;
    EraseLocked(std::string(id));
  }
}

void RendezvousTable::PublishLocked() {
  if (options_.on_usage) {
    options_.on_usage({entries_.size(), bytes_, guest_keys_, guest_bytes_});
  }
}

size_t RendezvousTable::keys() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t RendezvousTable::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void RendezvousTable::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

}  // namespace zerostate::server
