#include "server/replication/kept_sums.h"

#include "absl/strings/str_cat.h"
#include "server/core/populate.h"

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
  std::vector<std::string> freed;  // freed once mu_ is let go
  uint64_t returned = 0;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = kept_.begin(); it != kept_.end();) {
      if (it->first.first != job) {
        ++it;
        continue;
      }
      DropLocked(it->second);
      kept_.erase(it++);
    }
    for (auto it = room_.begin(); it != room_.end();) {
      if (it->first.first != job) {
        ++it;
        continue;
      }
      max_free_bytes_ -= it->second;
      room_.erase(it++);
    }
    returned = TrimLocked(freed);
    PublishLocked();
  }
  if (lender_ != nullptr && returned > 0) lender_->Return(returned);
}

uint64_t KeptSums::Provide(const std::string& job, uint32_t shard,
                           const std::vector<uint64_t>& sizes) {
  uint64_t step_bytes = 0;
  for (uint64_t bytes : sizes) step_bytes += bytes;
  {
    absl::MutexLock lock(&mu_);
    auto [room, added] =
        room_.try_emplace(std::make_pair(job, shard), step_bytes * steps_per_shard_);
    if (!added) return 0;
    max_free_bytes_ += room->second;
  }
  // The step in hand is recycled once applied; the others' buffers are
  // made here, outside the lock.
  uint64_t made = 0;
  for (uint64_t step = 1; step < steps_per_shard_; ++step) {
    for (uint64_t bytes : sizes) {
      if (bytes == 0) continue;
      if (!ReserveFree(bytes)) return made;
      AddFree(PopulatedString(bytes));
      made += bytes;
    }
  }
  return made;
}

std::string KeptSums::Buffer(uint64_t bytes) {
  std::string buffer;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = free_.size(); i-- > 0;) {
      if (free_[i].size() != bytes) continue;
      buffer = std::move(free_[i]);
      free_[i] = std::move(free_.back());
      free_.pop_back();
      free_bytes_ -= bytes;
      reserved_ -= bytes;
      PublishLocked();
      break;
    }
  }
  if (buffer.empty()) {
    buffer = PopulatedString(bytes);
  } else if (lender_ != nullptr) {
    lender_->Return(bytes);
  }
  return buffer;
}

bool KeptSums::ReserveFree(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    if (reserved_ + bytes > max_free_bytes_) return false;
    reserved_ += bytes;
  }
  if (lender_ == nullptr || lender_->Lend(bytes)) return true;
  absl::MutexLock lock(&mu_);
  reserved_ -= bytes;
  return false;
}

void KeptSums::AddFree(std::string sum) {
  absl::MutexLock lock(&mu_);
  free_bytes_ += sum.size();
  free_.push_back(std::move(sum));
  PublishLocked();
}

void KeptSums::Recycle(Sums sums) {
  for (auto& [block, sum] : sums) {
    if (sum.empty() || !ReserveFree(sum.size())) continue;  // freed with `sums`
    AddFree(std::move(sum));
  }
}

uint64_t KeptSums::TrimLocked(std::vector<std::string>& freed) {
  uint64_t bytes = 0;
  while (reserved_ > max_free_bytes_ && !free_.empty()) {
    const uint64_t size = free_.back().size();
    freed.push_back(std::move(free_.back()));
    free_.pop_back();
    free_bytes_ -= size;
    reserved_ -= size;
    bytes += size;
  }
  return bytes;
}

uint64_t KeptSums::DropIdle() {
  std::vector<std::string> dropped;
  absl::MutexLock lock(&mu_);
  const uint64_t bytes = free_bytes_;
  dropped.swap(free_);
  reserved_ -= bytes;
  free_bytes_ = 0;
  PublishLocked();
  return bytes;
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
  if (metrics_ == nullptr) return;
  metrics_->SetReplicaKeptSumBytes(bytes_);
  metrics_->SetRecycledSumBytes(free_bytes_);
}

}  // namespace zerostate::server
