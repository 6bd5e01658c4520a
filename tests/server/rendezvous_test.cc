#include "server/core/rendezvous.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerostate::server {
namespace {

const RendezvousOwner kOwner{"owner", true};

TEST(RendezvousTest, EveryRankGetsEveryValue) {
  RendezvousTable table;
  constexpr uint32_t kWorld = 4;
  std::vector<std::vector<std::string>> got(kWorld);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto v = table.Join(kOwner, "job", "nccl-id", r, kWorld, "v" + std::to_string(r),
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
  auto again = table.Join(kOwner, "job", "nccl-id", 2, kWorld, "v2", absl::Now());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->at(3), "v3");
}

TEST(RendezvousTest, BadCallsAreNamed) {
  RendezvousTable table;
  auto deadline = absl::Now() + absl::Milliseconds(30);
  auto late = table.Join(kOwner, "job", "k", 0, 3, "a", deadline);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.status().message().find("ranks [1, 2]"), std::string::npos) << late.status();
  auto world = table.Join(kOwner, "job", "k", 1, 2, "b", deadline);
  EXPECT_EQ(world.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(world.status().message().find("world"), std::string::npos);
  auto changed = table.Join(kOwner, "job", "k", 0, 3, "other", deadline);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(changed.status().message().find("another value"), std::string::npos);
  auto rank = table.Join(kOwner, "job", "k2", 5, 3, "", deadline);
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rank.status().message().find("rank"), std::string::npos);
  auto big = table.Join(kOwner, "job", "k3", 0, 1, std::string(5000, 'x'), deadline);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("value"), std::string::npos);
}

// Keys whose calls have returned are dropped to make room: 100,000 keys
// of one token (before: a server-wide cap of 100,000 keys, after which
// every job's rendezvous failed) leave the table at its quota, and another
// token's rendezvous works.
TEST(RendezvousTest, FinishedAndAbandonedKeysMakeRoomAndNeverBlockAnotherToken) {
  RendezvousTable table;
  const RendezvousOwner guest{"guest", false};
  for (int i = 0; i < 100000; ++i) {
    auto v = table.Join(guest, "ns", absl::StrCat("k", i), 0, 1, "", absl::Now());
    ASSERT_TRUE(v.ok()) << i << ": " << v.status();
  }
  EXPECT_LE(table.keys(), RendezvousOptions().guest.keys);
  // Abandoned keys of a world of 65536: memory follows the ranks that came.
  for (int i = 0; i < 3000; ++i) {
    auto v = table.Join(guest, "ns", absl::StrCat("w", i), 0, 65536, "x", absl::InfinitePast());
    ASSERT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded) << v.status();
  }
  EXPECT_LE(table.keys(), RendezvousOptions().guest.keys);
  EXPECT_LE(table.bytes(), RendezvousOptions().guest.bytes);
  auto other = table.Join(kOwner, "job", "barrier", 0, 1, "", absl::Now());
  EXPECT_TRUE(other.ok()) << other.status();
}

// A token with no job may hold a few keys with waiting calls; at its quota
// it is refused, naming the quota, and other tokens are not. A full
// jobless pool never refuses a newcomer: it drops the key with the fewest
// ranks, oldest first, whose waiting call gets UNAVAILABLE.
TEST(RendezvousTest, ATokenWithNoJobHasASmallQuotaAndAFullPoolDropsTheCheapestKey) {
  RendezvousOptions options;
  options.guest = {4, 1 << 20};
  options.guests = {6, 1 << 20};
  RendezvousTable table(options);
  const RendezvousOwner a{"a", false}, b{"b", false}, c{"c", false};
  std::vector<std::thread> waiting;
  std::vector<absl::Status> answers(8);
  auto wait = [&](const RendezvousOwner& o, const std::string& key, uint32_t rank,
                  uint32_t world, int slot) {
    waiting.emplace_back([&table, &answers, o, key, rank, world, slot] {
      answers[slot] = table.Join(o, "ns", key, rank, world, "", absl::InfiniteFuture()).status();
    });
  };
  // Waits until the waiting threads' keys are in the table.
  auto await_keys = [&](size_t n) {
    while (table.keys() < n) std::this_thread::yield();
  };
  for (int i = 0; i < 4; ++i) {
    wait(a, absl::StrCat("k", i), 0, 2, i);
    await_keys(i + 1);
  }
  auto refused = table.Join(a, "ns", "k4", 0, 1, "", absl::Now());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("4 keys"), std::string::npos) << refused.status();
  // b: a key with two ranks in it, and one with one: the pool is full.
  wait(b, "two", 0, 3, 4);
  await_keys(5);
  wait(b, "two", 1, 3, 5);
  wait(b, "one", 0, 2, 6);
  await_keys(6);
  // c's new key takes the place of a's oldest one-rank key.
  auto newcomer = table.Join(c, "ns", "c", 0, 1, "", absl::Now());
  EXPECT_TRUE(newcomer.ok()) << newcomer.status();
  waiting[0].join();
  EXPECT_EQ(answers[0].code(), absl::StatusCode::kUnavailable) << answers[0];
  EXPECT_NE(answers[0].message().find("dropped"), std::string::npos) << answers[0];
  EXPECT_LE(table.keys(), 6u);
  // b's two-rank key was kept: its third rank completes it.
  auto third = table.Join(b, "ns", "two", 2, 3, "", absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(third.ok()) << third.status();
  waiting[4].join();
  waiting[5].join();
  EXPECT_TRUE(answers[4].ok()) << answers[4];
  EXPECT_TRUE(answers[5].ok()) << answers[5];
  // A token with a job is not limited by tokens without one.
  auto job = table.Join(kOwner, "job", "barrier", 0, 1, "", absl::Now());
  EXPECT_TRUE(job.ok()) << job.status();
  table.Shutdown();
  for (size_t i : {1, 2, 3, 6}) waiting[i].join();
}

// A jobless key that a caller whose token now holds a job joins (rank 0
// after registering) leaves the jobless pool: no jobless newcomer drops it.
TEST(RendezvousTest, AKeyJoinedByItsRegisteredTokenIsNeverDropped) {
  RendezvousOptions options;
  options.guest = {1, 1 << 20};
  options.guests = {1, 1 << 20};
  RendezvousTable table(options);
  const RendezvousOwner before{"run", false}, after{"run", true};
  std::vector<absl::Status> answers(2);
  std::thread rank1([&] {
    answers[1] = table.Join(before, "ns", "registered", 1, 3, "", absl::InfiniteFuture()).status();
  });
  while (table.keys() < 1) std::this_thread::yield();
  const size_t one_rank = table.bytes();
  std::thread rank0([&] {
    answers[0] = table.Join(after, "ns", "registered", 0, 3, "", absl::InfiniteFuture()).status();
  });
  // Rank 0 has joined once the key holds a second value.
  while (table.bytes() < one_rank + RendezvousTable::kValueOverheadBytes) {
    std::this_thread::yield();
  }
  for (int i = 0; i < 10; ++i) {
    const RendezvousOwner other{absl::StrCat("other", i), false};
    auto v = table.Join(other, "ns", "k", 0, 1, "", absl::Now());
    EXPECT_TRUE(v.ok()) << v.status();
  }
  auto rank2 = table.Join(before, "ns", "registered", 2, 3, "", absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(rank2.ok()) << rank2.status();
  rank0.join();
  rank1.join();
  EXPECT_TRUE(answers[0].ok()) << answers[0];
  EXPECT_TRUE(answers[1].ok()) << answers[1];
}

// The server's flags (--jobless_rendezvous_keys_per_token,
// --jobless_rendezvous_keys) are checked at start, each named.
TEST(RendezvousTest, BadQuotasAreNamedByTheirFlags) {
  EXPECT_TRUE(RendezvousTable::Check(RendezvousOptions()).ok());
  RendezvousOptions none;
  none.guest.keys = 0;
  absl::Status s = RendezvousTable::Check(none);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("jobless_rendezvous_keys_per_token"), std::string::npos) << s;
  RendezvousOptions small_pool;
  small_pool.guest.keys = 16;
  small_pool.guests.keys = 8;
  s = RendezvousTable::Check(small_pool);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("jobless_rendezvous_keys: 8 keys is less than"), std::string::npos)
      << s;
}

TEST(RendezvousTest, AHugeKeyIsRefusedWithoutEchoingIt) {
  RendezvousTable table;
  std::string key(1 << 20, 'k');
  auto v = table.Join(kOwner, "job", key, 0, 1, "", absl::Now());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(v.status().message().size(), 200u) << "the key must not be echoed";
}

}  // namespace
}  // namespace zerostate::server
