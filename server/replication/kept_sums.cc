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

void KeptSums::Recycle(Sums sums) {
  for (auto& [block, sum] : sums) {
    if (sum.empty() || !ReserveFree(sum.size())) continue;  // freed with `sums`
    absl::MutexLock lock(&mu_);
    free_bytes_ += sum.size();
    free_.push_back(std::move(sum));
    PublishLocked();
  }
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
