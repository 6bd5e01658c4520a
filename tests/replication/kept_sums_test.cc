// The memory a backup receives its primary's sums into
// (server/replication/kept_sums.h, KeptSums as SumBuffers): a step's sums,
// once applied and recycled, are what the next sums of their size are
// received into (the same memory, not fresh pages), up to the bound on
// idle bytes; a sum of another size gets a new buffer.
#include "server/replication/kept_sums.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace zerostate::server {
namespace {

TEST(KeptSumsTest, AppliedSumsAreReceivedIntoAgainUpToTheirBound) {
  constexpr uint64_t kBytes = 4096;
  KeptSums kept(nullptr, /*max_free_bytes=*/2 * kBytes);
  std::string first = kept.Buffer(kBytes);
  ASSERT_EQ(first.size(), kBytes);
  const char* memory = first.data();
  KeptSums::Sums applied;
  applied.emplace_back(0, std::move(first));
  applied.emplace_back(1, std::string(kBytes, 'x'));
  applied.emplace_back(2, std::string(kBytes, 'y'));  // past the bound: freed
  kept.Recycle(std::move(applied));
  EXPECT_EQ(kept.free_bytes(), 2 * kBytes);
  std::string other = kept.Buffer(kBytes / 2);  // no recycled one of that size
  EXPECT_EQ(other.size(), kBytes / 2);
  EXPECT_EQ(kept.free_bytes(), 2 * kBytes);
  std::string again = kept.Buffer(kBytes);
  std::string again2 = kept.Buffer(kBytes);
  EXPECT_EQ(again.size(), kBytes);
  EXPECT_EQ(again2.size(), kBytes);
  EXPECT_TRUE(again.data() == memory || again2.data() == memory)
      << "the applied sum's memory was not received into again";
  EXPECT_EQ(kept.free_bytes(), 0u);
  std::string fresh = kept.Buffer(kBytes);  // none left: a new one
  EXPECT_EQ(fresh.size(), kBytes);
}

}  // namespace
}  // namespace zerostate::server
