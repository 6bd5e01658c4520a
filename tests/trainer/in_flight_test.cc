// trainer::InFlightStep in process, without a network: the Step is a
// function of the test's that decides on the policy it is given, and
// blocks where the test tells it to.
#include "trainer/engine/in_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "client/ticket_state.h"
#include "tests/trainer/blocked_gather.h"
#include "trainer/engine/pusher.h"
#include "trainer/policy.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::trainer {
namespace {

Policy Fp16Policy() {
  v1::TrainConfig train;
  train.set_precision(v1::PRECISION_FP16);
  auto policy = Policy::Create(train);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *policy;
}

// A Step that decides `step` with non-finite gradients (the fp16 policy
// skips and backs off), after `release` (if given) is notified.
InFlightStep::CoordinateFn Decides(uint64_t step, absl::Notification* release = nullptr) {
  return [step, release](Policy* policy) {
    if (release != nullptr) release->WaitForNotification();
    Coordinated out;
    auto d = policy->Decide(step, 1.0, /*nonfinite=*/1, /*average_over=*/1);
    out.status = d.status();
    if (d.ok()) out.decision = *d;
    return out;
  };
}

TEST(InFlightStepTest, IdleHasNothingToTake) {
  InFlightStep flight;
  EXPECT_FALSE(flight.active());
  EXPECT_FALSE(flight.step().has_value());
  EXPECT_TRUE(flight.Join().ok());
  EXPECT_TRUE(flight.Poll());
  EXPECT_FALSE(flight.Take().has_value());
  EXPECT_FALSE(flight.WaitGathersOut(0));  // never waits on an idle one
}

TEST(InFlightStepTest, StartRunsTheStepOnACopyAndTakeHandsItsVerdictOverOnce) {
  const Policy policy = Fp16Policy();
  absl::Notification release;
  InFlightStep flight;
  ASSERT_TRUE(flight.Start(7, policy, Decides(7, &release)).ok());
  EXPECT_TRUE(flight.active());
  EXPECT_TRUE(flight.running());
  EXPECT_EQ(flight.step(), 7u);
  EXPECT_FALSE(flight.Poll());  // still blocked
  release.Notify();
  std::optional<Verdict> v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->step, 7u);
  EXPECT_TRUE(v->coordinated);
  EXPECT_TRUE(v->outcome.status.ok());
  EXPECT_TRUE(v->outcome.decision.skip);
  ASSERT_TRUE(v->policy.has_value());
  // The copy moved on (fp16 overflow: the scale backs off after the
  // hysteresis), the policy given did not.
  EXPECT_TRUE(v->policy->skipped());
  EXPECT_FALSE(policy.skipped());
  EXPECT_FALSE(flight.active());
  EXPECT_FALSE(flight.Take().has_value());
}

TEST(InFlightStepTest, JoinKeepsTheVerdictUntilTaken) {
  InFlightStep flight;
  ASSERT_TRUE(flight.Start(2, Fp16Policy(), [](Policy*) {
                      Coordinated out;
                      out.status = absl::UnavailableError("server gone");
                      out.stage = "step 2";
                      return out;
                    }).ok());
  EXPECT_TRUE(absl::IsUnavailable(flight.Join()));
  EXPECT_FALSE(flight.running());
  EXPECT_TRUE(flight.active());
  EXPECT_TRUE(absl::IsUnavailable(flight.Join()));  // again: the same verdict
  std::optional<Verdict> v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome.stage, "step 2");
  EXPECT_TRUE(absl::IsUnavailable(v->outcome.status));
}

TEST(InFlightStepTest, AFailedStepCallsTheFailureHookOnItsThreadBeforeItIsJoined) {
  absl::Notification hooked;
  std::atomic<bool> hook_ran{false};
  InFlightStep flight;
  ASSERT_TRUE(flight
                  .Start(
                      4, Fp16Policy(),
                      [](Policy*) {
                        Coordinated out;
                        out.status = absl::NotFoundError("job deleted");
                        return out;
                      },
                      [&](const absl::Status& s) {
                        hook_ran = absl::IsNotFound(s);
                        hooked.Notify();
                      })
                  .ok());
  hooked.WaitForNotification();  // nobody joined yet
  EXPECT_TRUE(hook_ran);
  flight.Drop();
  EXPECT_FALSE(flight.active());
}

TEST(InFlightStepTest, ASecondStepWhileOneIsInFlightIsRefusedNamingIt) {
  InFlightStep flight;
  ASSERT_TRUE(flight.Follow(3).ok());
  for (absl::Status s : {flight.Start(4, Fp16Policy(), Decides(4)), flight.Follow(4),
                         flight.Fail(4, Coordinated{absl::AbortedError("x"), "", {}, false})}) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("step 3 is in flight"), std::string::npos) << s;
  }
  EXPECT_EQ(flight.step(), 3u);  // unchanged
  std::optional<Verdict> v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->coordinated);
  EXPECT_TRUE(v->outcome.status.ok());
  EXPECT_FALSE(v->policy.has_value());
}

TEST(InFlightStepTest, FailNeedsAFailedStatusAndIsJoinedAtOnce) {
  InFlightStep flight;
  absl::Status s = flight.Fail(5, Coordinated{});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_FALSE(flight.active());  // unchanged
  Coordinated refused{absl::InvalidArgumentError("lr ratio"), "step 5", {}, true};
  ASSERT_TRUE(flight.Fail(5, refused).ok());
  EXPECT_FALSE(flight.running());
  EXPECT_FALSE(flight.WaitGathersOut(5));  // no gathers will come
  std::optional<Verdict> v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->outcome.refused);
  EXPECT_EQ(v->outcome.status.message(), "lr ratio");
}

TEST(InFlightStepTest, WaitGathersOutReturnsOnceTheyAreOutOrTheStepEnded) {
  absl::Notification out, release;
  InFlightStep flight;
  ASSERT_TRUE(flight
                  .Start(6, Fp16Policy(),
                         [&](Policy* p) {
                           out.WaitForNotification();
                           flight.MarkGathersOut(6);
                           return Decides(6, &release)(p);
                         })
                  .ok());
  std::atomic<int> waited{-1};
  std::thread pusher([&] { waited = flight.WaitGathersOut(6) ? 1 : 0; });
  EXPECT_FALSE(flight.WaitGathersOut(5));  // another step's: no wait
  out.Notify();
  pusher.join();
  EXPECT_EQ(waited, 1);
  release.Notify();
  ASSERT_TRUE(flight.Join().ok());
  EXPECT_TRUE(flight.WaitGathersOut(6));  // joined, not taken: still out

  // A Step that ends before its gathers went out (its statistics failed).
  flight.Drop();
  ASSERT_TRUE(flight.Start(7, Fp16Policy(), [](Policy*) {
                      return Coordinated{absl::UnavailableError("stats"), "", {}, false};
                    }).ok());
  EXPECT_FALSE(flight.WaitGathersOut(7));
  EXPECT_FALSE(flight.WaitGathersOut(7));
}

// What a failed step leaves is dropped in order: the Step waited for and
// forgotten, then the pushes, their errors dropped.
TEST(InFlightStepTest, AbandonWaitsForTheStepThenDrainsThePushesDroppingTheirErrors) {
  absl::Notification release;
  std::atomic<bool> step_done{false};
  InFlightStep flight;
  ASSERT_TRUE(flight
                  .Start(8, Fp16Policy(),
                         [&](Policy* p) {
                           Coordinated out = Decides(8, &release)(p);
                           step_done = true;
                           return out;
                         })
                  .ok());
  Pusher pusher;
  PushOrder order;
  order.what = "push of step 9";
  order.waits.push_back([&] {  // as a push waiting on the Step's gathers
    flight.WaitGathersOut(8);
    return absl::OkStatus();
  });
  order.issue = [] { return client::CompletedTicket(absl::UnavailableError("server gone")); };
  pusher.Submit(std::move(order));
  std::thread releaser([&] { release.Notify(); });
  AbandonInFlight(&flight, &pusher, {});
  releaser.join();
  EXPECT_TRUE(step_done);
  EXPECT_FALSE(flight.active());
  EXPECT_TRUE(pusher.Drain().ok());  // the failed push's error was dropped
  AbandonInFlight(nullptr, nullptr, {});  // nothing to drop
}

TEST(AbandonInFlightTest, EndsAPushWaitingOnAGatherNoStepWillAnswer) {
  // Step 8 failed after its gathers of version 9 went out, the servers
  // alive; step 9's push waits on the push thread for the bucket's gather.
  // Abandoning cancels the gather: the push's wait ends, nothing is
  // pushed, and the dropped gather is done when it returns.
  InFlightStep flight;
  ASSERT_TRUE(
      flight.Fail(8, Coordinated{absl::InvalidArgumentError("lr: -1"), "step 8", {}, false}).ok());
  GatherSlot slot(Range{0, 8});
  BlockedGather g;
  ASSERT_TRUE(slot.Fetch(9, g.issue()).ok());
  Pusher pusher;
  std::atomic<bool> pushed{false};
  PushOrder order;
  order.what = "push of step 9";
  order.waits.push_back([&] { return slot.WaitGathered(9); });
  order.issue = [&] {
    pushed = true;
    return client::Ticket();
  };
  pusher.Submit(std::move(order));
  GatherSlot* slots[] = {&slot};
  AbandonInFlight(&flight, &pusher, slots);
  EXPECT_FALSE(pushed);
  EXPECT_FALSE(flight.active());
  EXPECT_FALSE(slot.pending().has_value());
  EXPECT_TRUE(g.ticket().Done());
  EXPECT_EQ(g.ticket().Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(pusher.Drain().ok());  // the skipped push's error was dropped
}

// A push of the step, its ticket completed with `status` once `gate` (if
// given) is open.
PushOrder StepPush(const std::string& name, absl::Status status,
                   absl::Notification* gate = nullptr) {
  PushOrder order;
  order.what = name;
  if (gate != nullptr) {
    order.waits.push_back([gate] {
      gate->WaitForNotification();
      return absl::OkStatus();
    });
  }
  order.issue = [status] { return client::CompletedTicket(status); };
  return order;
}

// The delayed update: step t's Step drains t's pushes on its own thread
// first, while the driver queues step t+1's behind them.
TEST(InFlightStepTest, StartDrainsTheStepsPushesOnItsThreadBeforeTheStep) {
  Pusher pusher;
  absl::Notification pushed;
  const uint64_t mark = pusher.Submit(StepPush("push of step 4 [0, 8)", absl::OkStatus(), &pushed));
  std::atomic<bool> stepped{false};
  InFlightStep flight;
  ASSERT_TRUE(flight
                  .Start(
                      4, Fp16Policy(),
                      [&](Policy* p) {
                        stepped = true;
                        return Decides(4)(p);
                      },
                      nullptr, StepPushes{&pusher, mark})
                  .ok());  // returns while the push waits
  absl::Notification later;  // step 5's, left alone
  pusher.Submit(StepPush("push of step 5 [0, 8)", absl::UnavailableError("later"), &later));
  EXPECT_FALSE(flight.Poll());
  EXPECT_FALSE(stepped);
  pushed.Notify();
  ASSERT_TRUE(flight.Join().ok());  // while step 5's push still waits
  EXPECT_TRUE(stepped);
  EXPECT_TRUE(flight.Take()->outcome.decision.skip);
  later.Notify();
  EXPECT_EQ(pusher.Drain().message(), "push of step 5 [0, 8): later");
}

TEST(InFlightStepTest, AFailedPushFailsTheStepAsItsStepWouldNamingThePush) {
  Pusher pusher;
  pusher.Submit(StepPush("push of step 6 [0, 8)", absl::OkStatus()));
  const uint64_t mark =
      pusher.Submit(StepPush("push of step 6 [8, 16)", absl::UnavailableError("server 1 is gone")));
  std::atomic<bool> stepped{false};
  absl::Status hooked;
  InFlightStep flight;
  ASSERT_TRUE(flight
                  .Start(
                      6, Fp16Policy(),
                      [&](Policy* p) {
                        stepped = true;
                        return Decides(6)(p);
                      },
                      [&](const absl::Status& s) { hooked = s; }, StepPushes{&pusher, mark})
                  .ok());
  std::optional<Verdict> v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(stepped) << "no Step after a failed push";
  EXPECT_TRUE(v->coordinated);
  EXPECT_TRUE(absl::IsUnavailable(v->outcome.status));
  EXPECT_EQ(v->outcome.status.message(), "server 1 is gone");
  EXPECT_EQ(v->outcome.stage, "push of step 6 [8, 16)");
  EXPECT_TRUE(absl::IsUnavailable(hooked)) << "the failure hook ran, as for a Step";
  EXPECT_TRUE(pusher.Drain().ok()) << "the step reported its push's error";
}

TEST(InFlightStepTest, AFollowedStepsPushesAreDrainedByTakeTheirErrorItsVerdict) {
  Pusher pusher;
  const uint64_t mark = pusher.Submit(StepPush("push of step 2 [0, 8)", absl::DataLossError("x")));
  InFlightStep flight;
  ASSERT_TRUE(flight.Follow(2, StepPushes{&pusher, mark}).ok());
  EXPECT_TRUE(flight.Poll());  // joined at once; Poll drains nothing
  std::optional<Verdict> v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->coordinated);
  EXPECT_TRUE(absl::IsDataLoss(v->outcome.status));
  EXPECT_EQ(v->outcome.stage, "push of step 2 [0, 8)");
  EXPECT_TRUE(pusher.Drain().ok());

  // A failed step keeps its own error; its pushes are drained, theirs dropped.
  const uint64_t next = pusher.Submit(StepPush("push of step 3 [0, 8)", absl::DataLossError("y")));
  ASSERT_TRUE(flight
                  .Fail(3, Coordinated{absl::InvalidArgumentError("lr ratio"), "step 3", {}, true},
                        StepPushes{&pusher, next})
                  .ok());
  EXPECT_TRUE(absl::IsInvalidArgument(flight.Join()));
  v = flight.Take();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->outcome.stage, "step 3");
  EXPECT_TRUE(pusher.Drain().ok());
}

}  // namespace
}  // namespace zerostate::trainer
