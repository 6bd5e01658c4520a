// The data plane's shared frame buffers (server/dataplane/data_buffers.h): the bytes
// borrowed stay within the budget (a borrower waits), an oversized frame
// still goes through alone, idle buffers are reused and kept only while
// they fit.
#include "server/dataplane/data_buffers.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"

namespace zerostate::server {
namespace {

TEST(DataBufferPoolTest, BorrowerWaitsUntilTheBudgetHasRoom) {
  DataBufferPool pool(3 << 20);
  DataBufferPool::Lease a = pool.Borrow(2 << 20, /*wait=*/true);
  ASSERT_NE(a.data(), nullptr);
  absl::Notification got;
  std::thread t([&] {
    DataBufferPool::Lease b = pool.Borrow(2 << 20, /*wait=*/true);
    got.Notify();
  });
  EXPECT_FALSE(got.WaitForNotificationWithTimeout(absl::Milliseconds(100)))
      << "4 MiB borrowed with a 3 MiB budget";
  EXPECT_EQ(pool.borrowed(), 2u << 20);
  a = DataBufferPool::Lease();  // given back
  got.WaitForNotification();
  t.join();
  EXPECT_EQ(pool.borrowed(), 0u);
}

TEST(DataBufferPoolTest, OversizedFrameGoesThroughAloneAndIsNotKept) {
  DataBufferPool pool(1 << 20);
  {
    DataBufferPool::Lease big = pool.Borrow(4 << 20, /*wait=*/true);
    ASSERT_NE(big.data(), nullptr);
    big.data()[(4 << 20) - 1] = 1;  // all of it is there
    EXPECT_EQ(pool.borrowed(), 4u << 20);
  }
  EXPECT_EQ(pool.borrowed(), 0u);
  EXPECT_EQ(pool.idle(), 0u) << "a buffer over the budget was kept";
}

TEST(DataBufferPoolTest, IdleBuffersAreReusedWithinTheBudget) {
  DataBufferPool pool(4 << 20);
  uint8_t* first;
  {
    DataBufferPool::Lease a = pool.Borrow(1 << 20, /*wait=*/true);
    first = a.data();
  }
  EXPECT_EQ(pool.idle(), 1u << 20);
  DataBufferPool::Lease b = pool.Borrow(1000, /*wait=*/false);
  EXPECT_EQ(b.data(), first) << "the idle buffer was not reused";
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_EQ(pool.borrowed(), 1000u);
}

TEST(DataBufferPoolTest, NonWaitingBorrowMayPassTheBudget) {
  DataBufferPool pool(1 << 20);
  DataBufferPool::Lease a = pool.Borrow(1 << 20, /*wait=*/true);
  DataBufferPool::Lease b = pool.Borrow(1 << 20, /*wait=*/false);  // under a block's mutex
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(pool.borrowed(), 2u << 20);
}

}  // namespace
}  // namespace zerostate::server
