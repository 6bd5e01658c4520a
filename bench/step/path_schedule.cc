#include "bench/step/path_schedule.h"

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace zerostate::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Pieces a DMA stage copies at a time.
constexpr size_t kDmaPieces = 8;

// Each piece's progress: 2k while stage k is ready (stages before it done),
// 2k + 1 while it runs; 2 * stages when all are done.
class Progress {
 public:
  Progress(size_t pieces, int stages) : state_(pieces), stages_(stages) {}
  size_t pieces() const { return state_.size(); }
  int Ready(size_t i) const {  // the stage ready to run, or -1
    const int s = state_[i].load(std::memory_order_acquire);
    return s % 2 == 0 && s < 2 * stages_ ? s / 2 : -1;
  }
  bool Claim(size_t i, int stage) {
    int expected = 2 * stage;
    return state_[i].compare_exchange_strong(expected, 2 * stage + 1, std::memory_order_acq_rel);
  }
  void Done(size_t i, int stage) { state_[i].store(2 * stage + 2, std::memory_order_release); }
  bool Before(size_t i, int stage) const {  // the stages before `stage` are done
    return state_[i].load(std::memory_order_acquire) == 2 * stage;
  }

 private:
  std::vector<std::atomic<int>> state_;
  int stages_;
};

}  // namespace

absl::StatusOr<Scheduled> RunScheduled(const std::vector<PathStage>& stages, int threads,
                                       const Barrier& barrier) {
  const int last = static_cast<int>(stages.size()) - 1;
  auto index = [&](const std::string& name) {
    for (int i = 0; i <= last; ++i)
      if (stages[i].name == name) return i;
    return -1;
  };
  const int held_stage = barrier.held.empty() ? -1 : index(barrier.held);
  const int after_stage = barrier.after.empty() ? -1 : index(barrier.after);
  if (!barrier.held.empty() && (held_stage < 0 || after_stage < 0 || after_stage >= held_stage)) {
    return absl::InvalidArgumentError(absl::StrCat("barrier ", barrier.held, " after ", barrier.after,
                                                   ": not two stages of the chain in that order"));
  }
  const size_t pieces = stages.front().pieces;
  Progress progress(pieces, last + 1);
  size_t cpu_work = 0;
  for (const PathStage& s : stages) cpu_work += s.dma ? 0 : pieces;
  std::atomic<size_t> cpu_done{0};
  // Pieces done with each stage (for the barrier).
  std::vector<std::atomic<size_t>> stage_done(stages.size());
  auto held = [&](int stage) {
    return stage == held_stage && stage_done[after_stage].load(std::memory_order_acquire) < pieces;
  };
  std::atomic<bool> failed_flag{false};
  absl::Mutex mu;
  absl::Status failed;
  auto fail = [&](absl::Status s) {
    absl::MutexLock lock(&mu);
    failed.Update(s);
    failed_flag = true;
  };
  Clock::time_point start, end, first;
  std::latch ready(threads + 2), go(1);
  std::vector<std::thread> pool;
  // The GPU's gradients, the last piece first.
  pool.emplace_back([&] {
    ready.count_down();
    go.wait();
    if (!stages.front().dma) return;
    for (size_t e = pieces; e > 0 && !failed_flag;) {
      const size_t begin = e > kDmaPieces ? e - kDmaPieces : 0;
      for (size_t i = begin; i < e; ++i) progress.Claim(i, 0);
      if (absl::Status s = stages.front().copy(begin, e); !s.ok()) return fail(s);
      for (size_t i = begin; i < e; ++i) progress.Done(i, 0);
      stage_done[0] += e - begin;
      e = begin;
    }
  });
  // The weights back to the GPU, the first piece first, as they are ready
  // (without the GPU: the pieces' ends, in that order).
  const int wait_for = stages.back().dma ? last : last + 1;
  pool.emplace_back([&] {
    ready.count_down();
    go.wait();
    for (size_t next = 0; next < pieces && !failed_flag;) {
      size_t e = next;
      while (e < pieces && e - next < kDmaPieces && progress.Before(e, wait_for)) ++e;
      if (e == next) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      if (stages.back().dma) {
        for (size_t i = next; i < e; ++i) progress.Claim(i, last);
        if (absl::Status s = stages.back().copy(next, e); !s.ok()) return fail(s);
        for (size_t i = next; i < e; ++i) progress.Done(i, last);
      }
      if (next == 0) first = Clock::now();
      next = e;
    }
    end = Clock::now();
  });
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      ready.count_down();
      go.wait();
      while (cpu_done.load(std::memory_order_relaxed) < cpu_work && !failed_flag) {
        bool worked = false;
        for (size_t i = 0; i < pieces && !worked; ++i) {
          const int stage = progress.Ready(i);
          if (stage < 0 || stages[stage].dma || held(stage) || !progress.Claim(i, stage)) continue;
          stages[stage].work(i);
          progress.Done(i, stage);
          ++stage_done[stage];
          ++cpu_done;
          worked = true;
        }
        if (!worked) std::this_thread::yield();
      }
    });
  }
  ready.wait();
  start = Clock::now();
  go.count_down();
  for (std::thread& t : pool) t.join();
  if (!failed.ok()) return failed;
  Scheduled out;
  out.seconds = std::chrono::duration<double>(end - start).count();
  out.first_seconds = std::chrono::duration<double>(first - start).count();
  return out;
}

}  // namespace zerostate::bench
