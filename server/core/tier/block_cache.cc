#include "server/core/tier/block_cache.h"

#include <cstring>

namespace zerostate::server {

BlockCache::BlockCache(uint64_t budget_bytes, uint64_t entry_bytes)
    : entry_bytes_(entry_bytes), capacity_(entry_bytes ? budget_bytes / entry_bytes : 0) {}

bool BlockCache::Get(uint64_t b, void* out) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(b);
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  std::memcpy(out, it->second->second.data(), entry_bytes_);
  return true;
}

void BlockCache::Put(uint64_t b, const void* data, bool may_evict) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(b);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
  } else if (lru_.size() < capacity_) {
    lru_.emplace_front(b, AlignedBuffer<char>(entry_bytes_));
    index_[b] = lru_.begin();
  } else if (may_evict && capacity_ > 0) {
    index_.erase(lru_.back().first);  // reuse the oldest entry's memory
    lru_.splice(lru_.begin(), lru_, std::prev(lru_.end()));
    lru_.front().first = b;
    index_[b] = lru_.begin();
  } else {
    return;
  }
  std::memcpy(lru_.front().second.data(), data, entry_bytes_);
}

void BlockCache::Erase(uint64_t b) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(b);
  if (it == index_.end()) return;
  lru_.erase(it->second);
  index_.erase(it);
}

uint64_t BlockCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return lru_.size() * entry_bytes_;
}

}  // namespace zerostate::server
