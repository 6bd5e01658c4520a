// The node's barrier and vote when a local peer never comes (a dead rank
// process): the wait ends after the group's timeout, naming the missing
// local rank, instead of hanging. Threads and shared-memory groups.
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/local_group.h"

namespace zerostate::worker {
namespace {

constexpr uint64_t kElems = 64;
constexpr absl::Duration kTimeout = absl::Milliseconds(200);

void ExpectNamesMissing(const absl::Status& s, const std::string& missing) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find(absl::StrCat("local ranks [", missing, "]")), std::string::npos) << s;
}

TEST(LocalBarrierFaultTest, ThreadGroupNamesTheRankThatNeverArrives) {
  auto group = MakeThreadGroup(3, kElems, kTimeout);
  // Rank 1 arrives, rank 2 is dead.
  absl::Status rank1;
  std::thread t([&] { rank1 = group->Barrier(1); });
  ExpectNamesMissing(group->Barrier(0), "2");
  t.join();
  ExpectNamesMissing(rank1, "2");
}

TEST(LocalBarrierFaultTest, SharedMemoryGroupNamesTheRankThatNeverArrives) {
  const std::string name = absl::StrCat("/zerostate-barrier-fault-", getpid());
  auto owner = OpenShmGroup(name, 2, 0, kElems, kTimeout);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto other = OpenShmGroup(name, 2, 1, kElems, kTimeout);  // opened, then never waits
  ASSERT_TRUE(other.ok()) << other.status();
  ExpectNamesMissing((*owner)->Barrier(0), "1");
}

TEST(LocalBarrierFaultTest, VoteIsTrueEverywhereIfAnyRankFailedAndBarriersGoOn) {
  for (const bool rank1_failed : {false, true}) {
    auto group = MakeThreadGroup(2, kElems, kTimeout);
    absl::StatusOr<bool> theirs = absl::UnknownError("not run");
    std::thread t([&] { theirs = group->Vote(1, rank1_failed); });
    absl::StatusOr<bool> mine = group->Vote(0, false);
    t.join();
    ASSERT_TRUE(mine.ok() && theirs.ok()) << mine.status() << theirs.status();
    EXPECT_EQ(*mine, rank1_failed);
    EXPECT_EQ(*theirs, rank1_failed);
    std::thread again([&] { EXPECT_TRUE(group->Barrier(1).ok()); });
    EXPECT_TRUE(group->Barrier(0).ok());
    again.join();
  }
}

TEST(LocalBarrierFaultTest, TooManyLocalRanksAreRefused) {
  auto g = OpenShmGroup("/zerostate-barrier-fault-too-many", kMaxLocalRanks + 1, 0, kElems);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("at most 64"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace zerostate::worker
