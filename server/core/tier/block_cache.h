// A RAM cache of blocks' state under a byte budget, least recently used
// first out. Entries are copies of what the disk holds (write-through), so
// dropping one never loses data. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/core/aligned_buffer.h"

namespace zerostate::server {

class BlockCache {
 public:
  // Holds at most budget_bytes / entry_bytes entries of entry_bytes each.
  BlockCache(uint64_t budget_bytes, uint64_t entry_bytes);

  // Copies block b's entry to `out` and marks it most recently used.
  // Returns false (and leaves `out` alone) when b is not cached.
  bool Get(uint64_t b, void* out);

  // Makes `data` block b's entry. A block not yet cached takes a free entry,
  // or, when the cache is full and may_evict, the least recently used one's;
  // otherwise it is not cached (an Update's sweep over every block passes
  // may_evict=false so it does not flush the whole cache each step).
  void Put(uint64_t b, const void* data, bool may_evict);

  void Erase(uint64_t b);

  uint64_t bytes() const;  // RAM held by entries now (<= budget)
  uint64_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<uint64_t, AlignedBuffer<char>>;
  const uint64_t entry_bytes_;
  const uint64_t capacity_;  // entries
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // front: most recently used
  absl::flat_hash_map<uint64_t, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
