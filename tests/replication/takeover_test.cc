// Which backup claims a lost primary's shard when (Takeover::ClaimDelay):
// the ring's order, a stagger apart; never a server without a copy.
#include "server/replication/takeover.h"

#include "gtest/gtest.h"

namespace zerostate::server {
namespace {

constexpr absl::Duration kStagger = absl::Milliseconds(500);

TEST(TakeoverTest, TheFirstBackupClaimsAtOnceTheNextOneAStaggerLater) {
  // 4 servers, k = 2: shard 3's copies are servers 3, 0, 1.
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 0, kStagger), absl::ZeroDuration());
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 1, kStagger), kStagger);
  // k = 1: the one backup, at once.
  EXPECT_EQ(Takeover::ClaimDelay(3, 1, 1, 2, kStagger), absl::ZeroDuration());
}

TEST(TakeoverTest, AServerWithoutACopyOrTheLostPrimaryItselfNeverClaims) {
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 2, kStagger), std::nullopt);  // not a copy
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 3, kStagger), std::nullopt);  // the lost primary
  EXPECT_EQ(Takeover::ClaimDelay(3, 0, 1, 2, kStagger), std::nullopt);  // no backups
  EXPECT_EQ(Takeover::ClaimDelay(3, 1, 3, 0, kStagger), std::nullopt);  // no such shard
  EXPECT_EQ(Takeover::ClaimDelay(3, 3, 1, 0, kStagger), std::nullopt);  // k >= servers
  EXPECT_EQ(Takeover::ClaimDelay(0, 0, 0, 0, kStagger), std::nullopt);
}

}  // namespace
}  // namespace zerostate::server
