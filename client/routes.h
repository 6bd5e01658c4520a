// Which server serves each shard of a job now: shard i on
// server i until a failover moves it to one of its backups (the next
// JobSpec.replicas servers of the ring). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace zerostate::client {

class ShardRoutes {
 public:
  explicit ShardRoutes(int shards) : server_(shards) {
    for (int i = 0; i < shards; ++i) server_[i].store(i);
  }
  int ServerOf(int shard) const { return server_[shard].load(); }
  // Moves `shard` from server `from` to `to`; false when it was not on
  // `from` (another call moved it first).
  bool Move(int shard, int from, int to) {
    return server_[shard].compare_exchange_strong(from, to);
  }

 private:
  std::vector<std::atomic<int>> server_;
};

// The incarnation each server of a job is expected to answer with (seen
// at register/attach): a server that answers with another restarted and
// lost its copies, unless a failover found its copy of a replicated shard
// caught up from the shard's primary and took its new
// incarnation. Indexed by server. Thread-safe.
class ServerIncarnations {
 public:
  explicit ServerIncarnations(const std::vector<uint64_t>& seen) : of_(seen.size()) {
    for (size_t i = 0; i < seen.size(); ++i) of_[i].store(seen[i]);
  }
  uint64_t Of(int server) const { return of_[server].load(); }
  void Set(int server, uint64_t incarnation) { of_[server].store(incarnation); }

 private:
  std::vector<std::atomic<uint64_t>> of_;
};

}  // namespace zerostate::client
