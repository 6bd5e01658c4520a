// Which server serves each shard of a job now: shard i on
// server i until a failover moves it to one of its backups (the next
// JobSpec.replicas servers of the ring). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::client {

class DataConnPool;  // client/data_conn.h

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

// The TCP data plane of each server of a job (null: none, push and gather
// go over gRPC), as the server advertised it at register/attach, until a
// failover finds the server restarted and caught up and takes
// the data port its new process listens on. Indexed by server.
// Thread-safe.
class DataPlanes {
 public:
  explicit DataPlanes(std::vector<std::shared_ptr<DataConnPool>> pools)
      : pools_(std::move(pools)) {}
  // The pool of `server` now; a caller keeps it for its whole attempt.
  std::shared_ptr<DataConnPool> Of(int server) const {
    absl::MutexLock lock(&mu_);
    return server < static_cast<int>(pools_.size()) ? pools_[server] : nullptr;
  }
  void Set(int server, std::shared_ptr<DataConnPool> pool) {
    absl::MutexLock lock(&mu_);
    if (server < static_cast<int>(pools_.size())) pools_[server] = std::move(pool);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<DataConnPool>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::client
