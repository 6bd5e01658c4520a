#include "server/rendezvous.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace zerostate::server {
namespace {

TEST(RendezvousTest, EveryRankGetsEveryValue) {
  RendezvousTable table;
  constexpr uint32_t kWorld = 4;
  std::vector<std::vector<std::string>> got(kWorld);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto v = table.Join("job", "nccl-id", r, kWorld, "v" + std::to_string(r),
                          absl::Now() + absl::Seconds(10));
      ASSERT_TRUE(v.ok()) << v.status();
      got[r] = *v;
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(got[r], (std::vector<std::string>{"v0", "v1", "v2", "v3"}));
  }
  // A retry after completion is answered the same.
  auto again = table.Join("job", "nccl-id", 2, kWorld, "v2", absl::Now());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->at(3), "v3");
}

TEST(RendezvousTest, BadCallsAreNamed) {
  RendezvousTable table;
  auto deadline = absl::Now() + absl::Milliseconds(30);
  auto late = table.Join("job", "k", 0, 3, "a", deadline);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.status().message().find("ranks [1, 2]"), std::string::npos) << late.status();
  auto world = table.Join("job", "k", 1, 2, "b", deadline);
  EXPECT_EQ(world.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(world.status().message().find("world"), std::string::npos);
  auto changed = table.Join("job", "k", 0, 3, "other", deadline);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(changed.status().message().find("another value"), std::string::npos);
  auto rank = table.Join("job", "k2", 5, 3, "", deadline);
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rank.status().message().find("rank"), std::string::npos);
  auto big = table.Join("job", "k3", 0, 1, std::string(5000, 'x'), deadline);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("value"), std::string::npos);
}

}  // namespace
}  // namespace zerostate::server
