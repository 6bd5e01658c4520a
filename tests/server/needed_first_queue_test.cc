// NeededFirstQueue: blocks come out lowest first, whatever the order they
// were queued in, each as often as it was queued.
#include "server/core/needed_first_queue.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace zerostate::server {
namespace {

TEST(NeededFirstQueueTest, TheLowestBlockComesFirstWhateverTheOrderQueued) {
  NeededFirstQueue q;
  EXPECT_EQ(q.Pop(), std::nullopt);
  // As a backward completes them: the last layer's blocks first.
  for (uint64_t local : {9, 8, 7}) q.Push(local);
  EXPECT_EQ(q.Pop(), 7u);
  // The first layer's blocks complete last and go ahead of those still queued.
  for (uint64_t local : {2, 1, 0, 8}) q.Push(local);
  std::vector<uint64_t> out;
  while (std::optional<uint64_t> local = q.Pop()) out.push_back(*local);
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 1, 2, 8, 8, 9}));
  EXPECT_EQ(q.Pop(), std::nullopt);
}

}  // namespace
}  // namespace zerostate::server
