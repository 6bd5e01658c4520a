#include "server/replication/takeover.h"

#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"

namespace zerostate::server {

Takeover::Takeover(Membership& membership, JobRegistry& jobs, Primaries& primaries,
                   Options options)
    : membership_(membership),
      jobs_(jobs),
      primaries_(primaries),
      options_(options),
      queue_(std::make_shared<Queue>()) {
  thread_ = std::thread([this] { Run(); });
  membership_.OnPrimaryLost([queue = queue_](const std::string& job, int shard) {
    if (shard < 0) return;
    absl::MutexLock lock(&queue->mu);
    queue->lost.push_back({job, static_cast<uint32_t>(shard), absl::InfinitePast()});
  });
}

Takeover::~Takeover() {
  membership_.OnPrimaryLost(nullptr);
  {
    absl::MutexLock lock(&queue_->mu);
    queue_->stop = true;
  }
  thread_.join();
}

std::optional<absl::Duration> Takeover::ClaimDelay(uint32_t servers, uint32_t replicas,
                                                   uint32_t shard, uint32_t self,
                                                   absl::Duration stagger) {
  if (servers == 0 || shard >= servers || replicas >= servers) return std::nullopt;
  const std::vector<uint32_t> copies = ReplicaServers(servers, shard, replicas);
  // copies[0] is the shard's own server, the primary that was lost.
  for (size_t i = 1; i < copies.size(); ++i) {
    if (copies[i] == self) return stagger * static_cast<int64_t>(i - 1);
  }
  return std::nullopt;
}

std::optional<absl::Time> Takeover::Due(const Lost& lost) const {
  auto copy = jobs_.GetShard(lost.job, lost.shard);
  if (!copy.ok() || (*copy)->spec().replicas() == 0) return std::nullopt;
  auto own = jobs_.Get(lost.job);
  if (!own.ok()) return std::nullopt;
  std::optional<absl::Duration> delay =
      ClaimDelay(static_cast<uint32_t>((*copy)->servers().size()), (*copy)->spec().replicas(),
                 lost.shard, (*own)->shard_index(), options_.stagger);
  if (!delay.has_value()) return std::nullopt;
  return absl::Now() + *delay;
}

void Takeover::Claim(const Lost& lost) {
  auto copy = jobs_.GetShard(lost.job, lost.shard);
  if (!copy.ok()) return;  // deleted meanwhile
  // Another backup (or the primary itself, back on a new lease) may hold
  // it by now: Serve then answers "not primary", which is no failure.
  if (!primaries_.Serve(**copy).ok()) return;
  if (!jobs_.GetShard(lost.job, lost.shard).ok()) {
    // Deleted while it was claimed: give the claim back, or a job
    // registered again under the id would find its shard taken.
    (void)primaries_.Release(lost.job);
    return;
  }
  std::cerr << absl::StrCat("zerostate-server: ", membership_.self(), " took over shard ",
                            lost.shard, " of job '", lost.job,
                            "' (its primary's claim vanished from the membership)\n")
            << std::flush;
}

void Takeover::Run() {
  Queue& q = *queue_;
  std::vector<Lost> waiting;  // due later, soonest last
  while (true) {
    std::vector<Lost> fresh;
    {
      absl::MutexLock lock(&q.mu);
      auto ready = [&q]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(q.mu) { return q.stop || !q.lost.empty(); };
      const absl::Time until = waiting.empty() ? absl::InfiniteFuture() : waiting.back().due;
      q.mu.AwaitWithDeadline(absl::Condition(&ready), until);
      if (q.stop) return;
      fresh.assign(std::make_move_iterator(q.lost.begin()), std::make_move_iterator(q.lost.end()));
      q.lost.clear();
    }
    for (Lost& lost : fresh) {
      std::optional<absl::Time> due = Due(lost);
      if (!due.has_value()) continue;
      lost.due = *due;
      waiting.push_back(std::move(lost));
    }
    std::sort(waiting.begin(), waiting.end(),
              [](const Lost& a, const Lost& b) { return a.due > b.due; });
    const absl::Time now = absl::Now();
    while (!waiting.empty() && waiting.back().due <= now) {
      Claim(waiting.back());
      waiting.pop_back();
    }
  }
}

}  // namespace zerostate::server
