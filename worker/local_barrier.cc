#include "worker/local_barrier.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerostate::worker {
namespace {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, bool shared, absl::Duration d) {
  timespec ts = absl::ToTimespec(d);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
          shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word, bool shared) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
          shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

absl::Status LocalBarrierWait(LocalBarrierState* s, uint32_t ranks, uint32_t rank, bool shared,
                              absl::Duration timeout) {
  const uint32_t gen = s->generation.load(std::memory_order_acquire);
  s->arrived[rank].store(gen + 1, std::memory_order_relaxed);
  if (s->count.fetch_add(1, std::memory_order_acq_rel) + 1 == ranks) {
    s->count.store(0, std::memory_order_relaxed);
    s->generation.store(gen + 1, std::memory_order_release);
    FutexWakeAll(&s->generation, shared);
    return absl::OkStatus();
  }
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  while (s->generation.load(std::memory_order_acquire) == gen) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      std::vector<uint32_t> missing;
      for (uint32_t r = 0; r < ranks; ++r) {
        if (s->arrived[r].load(std::memory_order_relaxed) != gen + 1) missing.push_back(r);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("local ranks [", absl::StrJoin(missing, ", "),
                       "] of this node did not reach the node's barrier within ",
                       absl::FormatDuration(timeout)));
    }
    FutexWait(&s->generation, gen, shared, std::min(left, absl::Seconds(1)));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> LocalVote(LocalBarrierState* s, uint32_t ranks, uint32_t rank, bool shared,
                               absl::Duration timeout, bool failed) {
  s->votes[rank].store(failed ? 1 : 0, std::memory_order_relaxed);
  if (auto st = LocalBarrierWait(s, ranks, rank, shared, timeout); !st.ok()) return st;
  bool any = false;
  for (uint32_t r = 0; r < ranks; ++r) any |= s->votes[r].load(std::memory_order_relaxed) != 0;
  // Nobody writes a vote again before every rank has read them all.
  if (auto st = LocalBarrierWait(s, ranks, rank, shared, timeout); !st.ok()) return st;
  return any;
}

}  // namespace zerostate::worker
