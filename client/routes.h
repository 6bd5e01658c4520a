// Which server serves each shard of a job now (issue 19): shard i on
// server i until a failover moves it to one of its backups (the next
// JobSpec.replicas servers of the ring). Thread-safe.
#pragma once

#include <atomic>
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

}  // namespace zerostate::client
