// The client's small concurrency parts: ticket, thread pool, byte budget.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "client/byte_budget.h"
#include "client/thread_pool.h"
#include "client/ticket_state.h"

namespace zerostate::client {
namespace {

TEST(TicketTest, DefaultTicketIsDoneAndOk) {
  Ticket t;
  EXPECT_TRUE(t.Done());
  EXPECT_TRUE(t.Wait().ok());
}

TEST(TicketTest, KeepsFirstErrorAndRunsOnDoneOnce) {
  int done_calls = 0;
  auto state = std::make_shared<Ticket::State>(2, [&] { ++done_calls; });
  Ticket t(state);
  state->Add(1);
  state->Done(absl::OkStatus());
  state->Done(absl::UnavailableError("first"));
  EXPECT_FALSE(t.Done());
  state->Done(absl::InternalError("second"));
  EXPECT_TRUE(t.Done());
  EXPECT_EQ(t.Wait().message(), "first");
  EXPECT_EQ(t.Wait().code(), absl::StatusCode::kUnavailable);  // may be waited twice
  EXPECT_EQ(done_calls, 1);
}

TEST(TicketTest, CompletedTicketCarriesStatus) {
  Ticket t = CompletedTicket(absl::InvalidArgumentError("x"));
  EXPECT_TRUE(t.Done());
  EXPECT_EQ(t.Wait().code(), absl::StatusCode::kInvalidArgument);
}

// WaitFor returns false while a part is pending (after its timeout), true
// once the last part is done, or at once for a completed ticket.
TEST(TicketTest, WaitForSaysWhetherItIsDone) {
  EXPECT_TRUE(Ticket().WaitFor(absl::ZeroDuration()));
  auto state = std::make_shared<Ticket::State>(1);
  Ticket t(state);
  EXPECT_FALSE(t.WaitFor(absl::Milliseconds(1)));
  std::thread done([state] { state->Done(absl::UnavailableError("x")); });
  EXPECT_TRUE(t.WaitFor(absl::InfiniteDuration()));
  done.join();
  EXPECT_EQ(t.Wait().code(), absl::StatusCode::kUnavailable);
}

TEST(ThreadPoolTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 100; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ThreadPoolTest, WaitsOnTicketFromOtherThreads) {
  ThreadPool pool(4);
  auto state = std::make_shared<Ticket::State>(4);
  for (int i = 0; i < 4; ++i) pool.Schedule([state] { state->Done(absl::OkStatus()); });
  EXPECT_TRUE(Ticket(state).Wait().ok());
}

// A pool that may grow starts a thread for a task no thread is free for:
// tasks that all wait for each other (as gathers wait for the step that
// the last of them is queued ahead of) all run at once, and it grows no
// further than its limit, reusing the threads it has.
TEST(ThreadPoolTest, AGrowingPoolRunsTasksThatWaitForEachOther) {
  ThreadPool pool(1, 8);
  struct Meeting {
    absl::Mutex mu;
    int arrived ABSL_GUARDED_BY(mu) = 0;
  };
  for (int round = 0; round < 2; ++round) {
    auto meeting = std::make_shared<Meeting>();
    auto all = std::make_shared<Ticket::State>(8);
    for (int i = 0; i < 8; ++i) {
      pool.Schedule([meeting, all] {
        absl::MutexLock lock(&meeting->mu);
        ++meeting->arrived;
        meeting->mu.Await(absl::Condition(
            +[](Meeting* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu) { return m->arrived == 8; },
            meeting.get()));
        all->Done(absl::OkStatus());
      });
    }
    EXPECT_TRUE(Ticket(all).WaitFor(absl::Seconds(30)));
    EXPECT_EQ(pool.size(), 8);
  }
  // A fixed pool (no limit given) never grows.
  ThreadPool fixed(2);
  auto two = std::make_shared<Ticket::State>(3);
  for (int i = 0; i < 3; ++i) fixed.Schedule([two] { two->Done(absl::OkStatus()); });
  EXPECT_TRUE(Ticket(two).Wait().ok());
  EXPECT_EQ(fixed.size(), 2);
}

TEST(ByteBudgetTest, BlocksUntilReleased) {
  ByteBudget budget(100);
  budget.Acquire(60);
  std::atomic<bool> acquired{false};
  std::thread t([&] {
    budget.Acquire(60);  // waits: 120 > 100
    acquired = true;
  });
  budget.Release(60);
  t.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_EQ(budget.held(), 60u);
}

TEST(ByteBudgetTest, OversizedAcquireGoesThroughWhenEmpty) {
  ByteBudget budget(10);
  budget.Acquire(1000);
  EXPECT_EQ(budget.held(), 1000u);
  budget.Release(1000);
  EXPECT_EQ(budget.held(), 0u);
}

}  // namespace
}  // namespace zerostate::client
