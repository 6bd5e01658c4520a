// trainer::GatherSlot in process, without a network: the gathers are
// tickets the test makes (completed, or left pending and completed by it,
// or blocked on a socket until cancelled: blocked_gather.h).
#include "trainer/engine/gather_slot.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "client/ticket_state.h"
#include "tests/trainer/blocked_gather.h"

namespace zerostate::trainer {
namespace {

using client::Ticket;

// A gather the test completes with Finish().
struct Gather {
  std::shared_ptr<Ticket::State> state = std::make_shared<Ticket::State>(1);
  GatherSlot::IssueFn issue() const {
    return [s = state] { return Ticket(s); };
  }
  void Finish(absl::Status status = absl::OkStatus()) { state->Done(status); }
};

GatherSlot::IssueFn Done(absl::Status status = absl::OkStatus()) {
  return [status] { return client::CompletedTicket(status); };
}

void ExpectRefused(const absl::Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(what), std::string::npos) << s;
  EXPECT_NE(s.message().find("gather slot [0, 8)"), std::string::npos) << s;
}

TEST(GatherSlotTest, FetchLandLandedGoesBackToIdle) {
  GatherSlot slot(Range{0, 8});
  EXPECT_FALSE(slot.pending().has_value());
  ASSERT_TRUE(slot.Fetch(3, Done()).ok());
  EXPECT_EQ(slot.pending(), 3u);
  auto land = slot.Land();
  ASSERT_TRUE(land.ok());
  EXPECT_TRUE(*land);
  EXPECT_EQ(slot.pending(), 3u);  // landing
  EXPECT_TRUE(slot.Landed(nullptr).ok());
  EXPECT_FALSE(slot.pending().has_value());
  EXPECT_EQ(slot.landed(), 3u);
  // Landing once: the second holder of a tied parameter lands nothing.
  land = slot.Land();
  ASSERT_TRUE(land.ok());
  EXPECT_FALSE(*land);
}

TEST(GatherSlotTest, AnEmptyShareIsFetchedWithNothingToGather) {
  GatherSlot slot(Range{4, 4});
  ASSERT_TRUE(slot.Fetch(1, nullptr).ok());
  EXPECT_TRUE(*slot.Land());
  EXPECT_TRUE(slot.Landed(nullptr).ok());
  EXPECT_EQ(slot.landed(), 1u);
}

TEST(GatherSlotTest, AFailedGatherStillLandsAndLandedReturnsItsError) {
  // Every local rank takes part in the node's all-gather: Land says so
  // even when this rank's gather failed; the error comes from Landed.
  GatherSlot slot(Range{0, 8});
  ASSERT_TRUE(slot.Fetch(2, Done(absl::UnavailableError("server 1 down"))).ok());
  auto land = slot.Land();
  ASSERT_TRUE(land.ok());
  EXPECT_TRUE(*land);
  absl::Status landed = slot.Landed(nullptr);
  EXPECT_EQ(landed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(landed.message(), "server 1 down");
  EXPECT_FALSE(slot.pending().has_value());
  // The error is handed over once.
  ASSERT_TRUE(slot.Fetch(3, Done()).ok());
  ASSERT_TRUE(*slot.Land());
  EXPECT_TRUE(slot.Landed(nullptr).ok());
}

TEST(GatherSlotTest, EachIllegalTransitionIsRefusedByNameChangingNothing) {
  GatherSlot slot(Range{0, 8});
  ExpectRefused(slot.Landed(nullptr), "landed while idle");
  ASSERT_TRUE(slot.Fetch(5, Done()).ok());
  ExpectRefused(slot.Fetch(6, Done()), "fetch of version 6 while version 5 is fetched");
  ExpectRefused(slot.Landed(nullptr), "landed while version 5 is fetched");
  EXPECT_EQ(slot.pending(), 5u);
  ASSERT_TRUE(*slot.Land());
  ExpectRefused(slot.Land().status(), "land while version 5 is landing");
  ExpectRefused(slot.Fetch(6, Done()), "fetch of version 6 while version 5 is landing");
  ExpectRefused(slot.Drop().status(), "drop while version 5 is landing");
  EXPECT_EQ(slot.pending(), 5u);
  EXPECT_FALSE(slot.landed().has_value());
  EXPECT_TRUE(slot.Landed(nullptr).ok());
  EXPECT_EQ(slot.landed(), 5u);
}

TEST(GatherSlotTest, DropForgetsTheGatherAndHandsItsTicketOver) {
  GatherSlot slot(Range{0, 8});
  ASSERT_TRUE(slot.Fetch(1, Done()).ok());
  ASSERT_TRUE(*slot.Land());
  ASSERT_TRUE(slot.Landed(nullptr).ok());
  Gather g;
  ASSERT_TRUE(slot.Fetch(2, g.issue()).ok());
  auto dropped = slot.Drop();
  ASSERT_TRUE(dropped.ok());
  EXPECT_FALSE(dropped->Done());  // the driver may wait for it
  g.Finish();
  EXPECT_TRUE(dropped->Wait().ok());
  EXPECT_FALSE(slot.pending().has_value());
  EXPECT_FALSE(slot.landed().has_value());
  EXPECT_FALSE(*slot.Land());  // nothing to land
  ASSERT_TRUE(slot.Drop().ok());  // idle: nothing to drop
  EXPECT_TRUE(slot.Fetch(2, Done()).ok());
}

TEST(GatherSlotTest, TheNextFetchWaitsForTheLastCopyOutOfTheBuffer) {
  GatherSlot slot(Range{0, 8});
  std::vector<std::string> log;
  ASSERT_TRUE(slot.Fetch(1, Done()).ok());
  ASSERT_TRUE(*slot.Land());
  ASSERT_TRUE(slot.Landed([&log] {
    log.push_back("copy read the buffer");
    return absl::OkStatus();
  }).ok());
  EXPECT_TRUE(log.empty());  // not before the next fetch
  ASSERT_TRUE(slot.Fetch(2, [&log] {
    log.push_back("gather writes the buffer");
    return Ticket();
  }).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"copy read the buffer", "gather writes the buffer"}));
  // Once: the landing of version 2 sets the next one.
  ASSERT_TRUE(*slot.Land());
  ASSERT_TRUE(slot.Landed(nullptr).ok());
  ASSERT_TRUE(slot.Fetch(3, Done()).ok());
  EXPECT_EQ(log.size(), 2u);
}

TEST(GatherSlotTest, AFailedReuseWaitIssuesNothingAndIsRunAgain) {
  GatherSlot slot(Range{0, 8});
  int waits = 0;
  ASSERT_TRUE(slot.Fetch(1, Done()).ok());
  ASSERT_TRUE(*slot.Land());
  ASSERT_TRUE(slot.Landed([&waits] {
    return ++waits == 1 ? absl::InternalError("event failed") : absl::OkStatus();
  }).ok());
  bool issued = false;
  auto issue = [&issued] {
    issued = true;
    return Ticket();
  };
  absl::Status s = slot.Fetch(2, issue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(issued);
  EXPECT_FALSE(slot.pending().has_value());
  ASSERT_TRUE(slot.Fetch(2, issue).ok());
  EXPECT_TRUE(issued);
  EXPECT_EQ(waits, 2);
}

TEST(GatherSlotTest, LandWatchesUntilTheGatherIsDone) {
  GatherSlot slot(Range{0, 8});
  Gather g;
  ASSERT_TRUE(slot.Fetch(1, g.issue()).ok());
  int watched = 0;
  auto land = slot.Land([&] {
    if (++watched == 3) g.Finish();
    return true;
  });
  ASSERT_TRUE(land.ok());
  EXPECT_GE(watched, 3);
  EXPECT_TRUE(slot.Landed(nullptr).ok());
}

TEST(GatherSlotTest, WaitGatheredWaitsForThatVersionsGatherOnAnotherThread) {
  GatherSlot slot(Range{0, 8});
  Gather g;
  ASSERT_TRUE(slot.Fetch(4, g.issue()).ok());
  absl::Notification returned;
  absl::Status waited;
  std::thread pusher([&] {
    waited = slot.WaitGathered(4);
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  g.Finish();
  pusher.join();
  EXPECT_TRUE(waited.ok());
  // An older version: the gather of a newer one is in flight, and it
  // waits for blocks at least at that version.
  EXPECT_TRUE(slot.WaitGathered(3).ok());
  // A newer version than fetched or landed was never fetched.
  EXPECT_EQ(slot.WaitGathered(5).code(), absl::StatusCode::kAborted);
}

TEST(GatherSlotTest, WaitGatheredAfterLandingAndAfterDrop) {
  GatherSlot slot(Range{0, 8});
  ASSERT_TRUE(slot.Fetch(4, Done(absl::UnavailableError("lost"))).ok());
  // The gather's own error reaches the waiting push.
  EXPECT_EQ(slot.WaitGathered(4).code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(*slot.Land());
  EXPECT_EQ(slot.WaitGathered(4).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(slot.Landed(nullptr).ok());
  EXPECT_EQ(slot.WaitGathered(4).code(), absl::StatusCode::kAborted);  // did not land
  ASSERT_TRUE(slot.Fetch(4, Done()).ok());
  ASSERT_TRUE(*slot.Land());
  ASSERT_TRUE(slot.Landed(nullptr).ok());
  EXPECT_TRUE(slot.WaitGathered(4).ok());  // landed: its blocks are at 4
  EXPECT_TRUE(slot.WaitGathered(2).ok());
  ASSERT_TRUE(slot.Fetch(5, Done()).ok());
  ASSERT_TRUE(slot.Drop().ok());
  absl::Status s = slot.WaitGathered(5);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "gather slot [0, 8): version 5 was not fetched (the update that brings it failed)");
  EXPECT_EQ(slot.WaitGathered(4).code(), absl::StatusCode::kAborted);  // forgotten too
}

TEST(GatherSlotTest, DropCancelsAGatherNoStepWillAnswer) {
  // The Step that was to bring version 3 failed on servers that are
  // alive: only a cancel ends the gather (else its deadline, minutes).
  GatherSlot slot(Range{0, 8});
  BlockedGather g;
  ASSERT_TRUE(slot.Fetch(3, g.issue()).ok());
  auto dropped = slot.Drop();
  ASSERT_TRUE(dropped.ok());
  ASSERT_TRUE(dropped->WaitFor(absl::Seconds(30))) << "the dropped gather still waits";
  absl::Status s = dropped->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(s.message(), "gather slot [0, 8): version 3 was dropped");
  EXPECT_FALSE(slot.pending().has_value());
}

TEST(GatherSlotTest, CancelEndsTheGatherAndItsWaitsWhileTheSlotKeepsIt) {
  GatherSlot slot(Range{0, 8});
  slot.Cancel("nothing fetched");  // idle: nothing to end
  BlockedGather g;
  ASSERT_TRUE(slot.Fetch(4, g.issue()).ok());
  absl::Status waited;
  std::thread pusher([&] { waited = slot.WaitGathered(4); });
  std::thread coordinator([&] { slot.Cancel("step 3 failed: INVALID_ARGUMENT: lr: -1"); });
  auto land = slot.Land();  // every local rank still lands: the all-gather follows
  coordinator.join();
  pusher.join();
  ASSERT_TRUE(land.ok());
  EXPECT_TRUE(*land);
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
  absl::Status landed = slot.Landed(nullptr);
  EXPECT_EQ(landed.code(), absl::StatusCode::kCancelled) << landed;
  EXPECT_EQ(landed.message(), "step 3 failed: INVALID_ARGUMENT: lr: -1");
  EXPECT_FALSE(slot.landed().has_value());
  ASSERT_TRUE(slot.Fetch(4, Done()).ok());  // the next fetch goes out as usual
  ASSERT_TRUE(*slot.Land());
  EXPECT_TRUE(slot.Landed(nullptr).ok());
}

}  // namespace
}  // namespace zerostate::trainer
