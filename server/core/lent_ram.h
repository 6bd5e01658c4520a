// Memory a server keeps to reuse that is no job's (a backup's recycled
// sum buffers, server/replication/kept_sums.h) counts in the RAM budget
// (--ram_budget_bytes) beside the jobs: the registry lends it room the
// jobs leave, and takes the room back when a job needs it (JobRegistry
// implements RamLender). Thread-safe.
#pragma once

#include <cstdint>

namespace zerostate::server {

// Where such memory is reserved.
class RamLender {
 public:
  virtual ~RamLender() = default;
  // Reserves `bytes` if the jobs and what is lent already leave room for
  // them in the budget; false (nothing reserved) otherwise.
  [[nodiscard]] virtual bool Lend(uint64_t bytes) = 0;
  // Gives back `bytes` of what Lend reserved (the memory was freed or
  // taken into use).
  virtual void Return(uint64_t bytes) = 0;
};

// What holds such memory: drops it when a job needs the room.
class LentRam {
 public:
  virtual ~LentRam() = default;
  // Frees every idle byte held under a Lend and returns how many: they are
  // the lender's again (no Return follows for them). Called under the
  // lender's lock: must not call into the lender.
  virtual uint64_t DropIdle() = 0;
};

}  // namespace zerostate::server
