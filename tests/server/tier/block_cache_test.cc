#include "server/core/tier/block_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace zerostate::server {
namespace {

constexpr uint64_t kEntry = 256;

std::vector<char> Filled(char c) { return std::vector<char>(kEntry, c); }

TEST(BlockCacheTest, KeepsWholeEntriesWithinBudget) {
  BlockCache cache(kEntry * 3 + kEntry / 2, kEntry);
  EXPECT_EQ(cache.capacity(), 3u);
  for (uint64_t b = 0; b < 10; ++b) cache.Put(b, Filled('a' + b).data(), /*may_evict=*/true);
  EXPECT_EQ(cache.bytes(), 3 * kEntry);
  std::vector<char> out(kEntry);
  EXPECT_FALSE(cache.Get(6, out.data()));
  for (uint64_t b = 7; b < 10; ++b) {
    ASSERT_TRUE(cache.Get(b, out.data())) << b;
    EXPECT_EQ(out, Filled('a' + b));
  }
}

TEST(BlockCacheTest, EvictsLeastRecentlyUsedOnlyWhenAllowed) {
  BlockCache cache(kEntry * 2, kEntry);
  cache.Put(1, Filled('1').data(), true);
  cache.Put(2, Filled('2').data(), true);
  std::vector<char> out(kEntry);
  ASSERT_TRUE(cache.Get(1, out.data()));       // 2 is now the oldest
  cache.Put(3, Filled('3').data(), false);     // full, no eviction: not cached
  EXPECT_FALSE(cache.Get(3, out.data()));
  cache.Put(3, Filled('3').data(), true);      // evicts 2
  EXPECT_FALSE(cache.Get(2, out.data()));
  EXPECT_TRUE(cache.Get(1, out.data()));
  cache.Put(1, Filled('x').data(), false);     // an update of a cached entry always lands
  ASSERT_TRUE(cache.Get(1, out.data()));
  EXPECT_EQ(out, Filled('x'));
  cache.Erase(1);
  EXPECT_FALSE(cache.Get(1, out.data()));
  EXPECT_EQ(cache.bytes(), kEntry);
}

TEST(BlockCacheTest, ZeroBudgetCachesNothing) {
  BlockCache cache(kEntry - 1, kEntry);
  cache.Put(0, Filled('0').data(), true);
  std::vector<char> out(kEntry);
  EXPECT_FALSE(cache.Get(0, out.data()));
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace
}  // namespace zerostate::server
