// ThreadPool: ParallelFor runs every index once, on the caller and the
// pool, and never waits behind tasks queued before it.
#include "server/core/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"

namespace zerostate::server {
namespace {

TEST(ThreadPoolTest, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(3);
  for (size_t n : {1, 2, 3, 4, 100}) {
    std::vector<std::atomic<int>> runs(n);
    pool.ParallelFor(n, [&](size_t i) { ++runs[i]; });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

// The pool's only thread is held by a task queued first (as a speculation
// or a block's statistics may be): ParallelFor's caller does the work
// itself and returns, instead of waiting for its helper to get a turn.
TEST(ThreadPoolTest, ParallelForDoesNotWaitBehindTasksQueuedBeforeIt) {
  ThreadPool pool(1);
  absl::Notification release, started;
  pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  std::vector<int> runs(8, 0);
  pool.ParallelFor(runs.size(), [&](size_t i) { ++runs[i]; });  // would hang before
  EXPECT_EQ(runs, std::vector<int>(8, 1));
  release.Notify();
}

// A pool made with a nice value and a name runs its tasks at that
// priority, on threads of that name; the caller's own is left alone.
TEST(ThreadPoolTest, ItsThreadsRunAtItsNiceValue) {
  auto nice_here = [] {
    errno = 0;
    return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  };
  const int caller = nice_here();
  if (caller > 7) GTEST_SKIP() << "this process already runs at nice " << caller;
  ThreadPool pool(2, 7, "zs-test-pool");
  std::vector<int> seen(16, -100);
  pool.ParallelFor(seen.size(), [&](size_t i) { seen[i] = nice_here(); });
  for (int n : seen) EXPECT_TRUE(n == 7 || n == caller) << n;  // the caller takes part too
  absl::Notification done;
  int scheduled = -100;
  char name[16] = {};
  pool.Schedule([&] {
    scheduled = nice_here();
    pthread_getname_np(pthread_self(), name, sizeof(name));
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(scheduled, 7);
  EXPECT_STREQ(name, "zs-test-pool");
  EXPECT_EQ(nice_here(), caller);
}

}  // namespace
}  // namespace zerostate::server
