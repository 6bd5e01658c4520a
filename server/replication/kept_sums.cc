#include "server/replication/kept_sums.h"

#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::Status KeptSums::Keep(const std::string& job, uint32_t shard, uint64_t transfer,
                            uint64_t block, std::string sum) {
  absl::MutexLock lock(&mu_);
  Kept& kept = kept_[{job, shard}];
  if (kept.transfer != transfer) {
    DropLocked(kept);
    kept = Kept{transfer, {}, 0};
  }
  for (const auto& [held, bytes] : kept.sums) {
    if (held == block) {
      return absl::InvalidArgumentError(absl::StrCat("REPLICA_SUM: block ", block,
                                                     " came twice in transfer ", transfer));
    }
  }
  kept.bytes += sum.size();
  bytes_ += sum.size();
  kept.sums.emplace_back(block, std::move(sum));
  PublishLocked();
  return absl::OkStatus();
}

KeptSums::Sums KeptSums::Take(const std::string& job, uint32_t shard, uint64_t transfer) {
  absl::MutexLock lock(&mu_);
  auto it = kept_.find(std::make_pair(job, shard));
  if (it == kept_.end() || it->second.transfer != transfer) return {};
  Sums sums = std::move(it->second.sums);
  DropLocked(it->second);
  kept_.erase(it);
  PublishLocked();
  return sums;
}

void KeptSums::Forget(const std::string& job) {
  absl::MutexLock lock(&mu_);
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (it->first.first != job) {
      ++it;
      continue;
    }
    DropLocked(it->second);
    kept_.erase(it++);
  }
  PublishLocked();
}

std::string KeptSums::Buffer(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = free_.size(); i-- > 0;) {
      if (free_[i].size() != bytes) continue;
      std::string reused = std::move(free_[i]);
      free_[i] = std::move(free_.back());
      free_.pop_back();
      free_bytes_ -= bytes;
      return reused;
    }
  }
  std::string fresh;
  fresh.resize(bytes);
  return fresh;
}

void KeptSums::Recycle(Sums sums) {
  absl::MutexLock lock(&mu_);
  for (auto& [block, sum] : sums) {
    if (sum.empty() || free_bytes_ + sum.size() > max_free_bytes_) continue;  // freed below
    free_bytes_ += sum.size();
    free_.push_back(std::move(sum));
  }
}

uint64_t KeptSums::free_bytes() const {
  absl::MutexLock lock(&mu_);
  return free_bytes_;
}

uint64_t KeptSums::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void KeptSums::DropLocked(const Kept& kept) { bytes_ -= kept.bytes; }

void KeptSums::PublishLocked() {
  if (metrics_ != nullptr) metrics_->SetReplicaKeptSumBytes(bytes_);
}

}  // namespace zerostate::server
