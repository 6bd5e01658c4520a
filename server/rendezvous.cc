#include "server/rendezvous.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerostate::server {
namespace {

absl::Status CheckArgs(uint32_t rank, uint32_t world, const std::string& value) {
  if (world == 0 || world > RendezvousTable::kMaxWorld) {
    return absl::InvalidArgumentError(
        absl::StrCat("world: ", world, " must be in [1, ", RendezvousTable::kMaxWorld, "]"));
  }
  if (rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", rank, " is not below world ", world));
  }
  if (value.size() > RendezvousTable::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value: ", value.size(), " bytes exceed ",
                                                   RendezvousTable::kMaxValueBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RendezvousTable::Join(const std::string& ns,
                                                          const std::string& key, uint32_t rank,
                                                          uint32_t world, const std::string& value,
                                                          absl::Time deadline) {
  if (auto s = CheckArgs(rank, world, value); !s.ok()) return s;
  std::string id = absl::StrCat(ns.size(), ":", ns, key);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxKeys) {
      return absl::ResourceExhaustedError(absl::StrCat("rendezvous: more than ", kMaxKeys, " keys"));
    }
    Entry e;
    e.world = world;
    e.values.resize(world);
    e.present.resize(world);
    it = entries_.emplace(id, std::move(e)).first;
  }
  Entry& e = it->second;
  if (e.world != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("world: ", world, " differs from ", e.world, " given by an earlier rank"));
  }
  if (e.present[rank] && e.values[rank] != value) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: rank ", rank, " joined key '", key, "' before with another value"));
  }
  if (!e.present[rank]) {
    e.present[rank] = true;
    e.values[rank] = value;
    ++e.count;
  }
  auto done = [&] { return shutting_down_ || e.count == e.world; };
  bool ok = mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (shutting_down_) return absl::UnavailableError("server is shutting down");
  if (!ok) {
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < e.world; ++r) {
      if (!e.present[r]) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat("rendezvous '", key, "': ranks [",
                                                    absl::StrJoin(missing, ", "),
                                                    "] did not arrive in time"));
  }
  return e.values;
}

void RendezvousTable::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

}  // namespace zerostate::server
