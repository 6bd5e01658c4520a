// trainer::Pusher in process, without a network: the pushes are tickets
// the test makes (completed, or completed with an error).
#include "trainer/engine/pusher.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/ticket_state.h"

namespace zerostate::trainer {
namespace {

// What the orders did, in the order they did it.
class Log {
 public:
  void Add(std::string event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  std::vector<std::string> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

PushOrder Order(Log* log, const std::string& name, absl::Status push = absl::OkStatus(),
                absl::Status wait = absl::OkStatus()) {
  PushOrder order;
  order.what = name;
  order.waits.push_back([log, name, wait] {
    log->Add(name + " wait");
    return wait;
  });
  order.issue = [log, name, push] {
    log->Add(name + " push");
    return client::CompletedTicket(push);
  };
  return order;
}

TEST(PusherTest, RunsEachOrdersWaitsThenItsPushInSubmissionOrder) {
  Log log;
  Pusher pusher;
  for (const char* name : {"a", "b", "c"}) pusher.Submit(Order(&log, name));
  ASSERT_TRUE(pusher.Drain().ok());
  EXPECT_EQ(log.events(),
            (std::vector<std::string>{"a wait", "a push", "b wait", "b push", "c wait", "c push"}));
}

TEST(PusherTest, SubmitDoesNotWaitDrainDoes) {
  Log log;
  Pusher pusher;
  absl::Notification copied;
  PushOrder order = Order(&log, "a");
  order.waits.insert(order.waits.begin(), [&copied] {
    copied.WaitForNotification();
    return absl::OkStatus();
  });
  pusher.Submit(std::move(order));  // returns while its wait blocks
  EXPECT_TRUE(log.events().empty());
  absl::Notification drained;
  std::thread drainer([&] {
    EXPECT_TRUE(pusher.Drain().ok());
    drained.Notify();
  });
  EXPECT_FALSE(drained.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  copied.Notify();
  drainer.join();
  EXPECT_EQ(log.events(), (std::vector<std::string>{"a wait", "a push"}));
}

TEST(PusherTest, AFailedWaitSkipsItsPushAndDrainNamesIt) {
  Log log;
  Pusher pusher;
  pusher.Submit(Order(&log, "push of step 3 [0, 8)", absl::OkStatus(),
                      absl::AbortedError("the wait before it returned 4")));
  pusher.Submit(Order(&log, "b"));
  absl::Status s = pusher.Drain();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "push of step 3 [0, 8): the wait before it returned 4");
  EXPECT_EQ(log.events(),
            (std::vector<std::string>{"push of step 3 [0, 8) wait", "b wait", "b push"}));
  EXPECT_TRUE(pusher.Drain().ok()) << "an error is reported once";
}

TEST(PusherTest, AFailedPushIsDrainsFirstError) {
  Log log;
  Pusher pusher;
  pusher.Submit(Order(&log, "a"));
  pusher.Submit(Order(&log, "b", absl::UnavailableError("server 1 is gone")));
  pusher.Submit(Order(&log, "c", absl::InternalError("later")));
  absl::Status s = pusher.Drain();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "b: server 1 is gone");
  EXPECT_EQ(log.events().size(), 6u);
}

TEST(PusherTest, TheDestructorRunsWhatIsQueued) {
  Log log;
  {
    Pusher pusher;
    for (const char* name : {"a", "b"}) pusher.Submit(Order(&log, name));
  }
  EXPECT_EQ(log.events().size(), 4u);
}

// An order whose push is a ticket the test completes (Finish).
class HeldPush {
 public:
  PushOrder Order(const std::string& name) {
    PushOrder order;
    order.what = name;
    order.issue = [state = state_] { return client::Ticket(state); };
    return order;
  }
  void Finish(absl::Status status = absl::OkStatus()) { state_->Done(status); }

 private:
  std::shared_ptr<client::Ticket::State> state_ = std::make_shared<client::Ticket::State>(1);
};

// An order whose wait blocks until the test opens it.
PushOrder Gated(Log* log, const std::string& name, absl::Notification* gate,
                absl::Status push = absl::OkStatus()) {
  PushOrder order = Order(log, name, push);
  order.waits.insert(order.waits.begin(), [gate] {
    gate->WaitForNotification();
    return absl::OkStatus();
  });
  return order;
}

TEST(PusherTest, MarksCountTheOrdersSubmitted) {
  Log log;
  Pusher pusher;
  EXPECT_EQ(pusher.Mark(), 0u);
  EXPECT_EQ(pusher.Submit(Order(&log, "a")), 1u);
  EXPECT_EQ(pusher.Submit(Order(&log, "b")), 2u);
  EXPECT_EQ(pusher.Mark(), 2u);
  ASSERT_TRUE(pusher.Drain().ok());
  EXPECT_EQ(pusher.Mark(), 2u);  // a drain does not renumber
  EXPECT_TRUE(pusher.Drain(0).ok());
}

// A step's pushes drained while the next step's are queued behind them:
// those stay, running, their errors kept for their own drain.
TEST(PusherTest, APartialDrainLeavesLaterOrdersAndTheirErrors) {
  Log log;
  Pusher pusher;
  pusher.Submit(Order(&log, "a"));
  const uint64_t mark = pusher.Submit(Order(&log, "b", absl::UnavailableError("server 1 is gone")));
  absl::Notification gate;
  pusher.Submit(Gated(&log, "c", &gate, absl::InternalError("later")));
  absl::Status s = pusher.Drain(mark);  // returns while c's wait blocks
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "b: server 1 is gone");
  EXPECT_FALSE(pusher.DoneThrough(pusher.Mark()));
  gate.Notify();
  s = pusher.Drain();
  EXPECT_EQ(s.message(), "c: later") << "the later order's error is its own drain's";
  EXPECT_TRUE(pusher.Drain().ok());
  EXPECT_EQ(log.events(),
            (std::vector<std::string>{"a wait", "a push", "b wait", "b push", "c wait", "c push"}));
}

TEST(PusherTest, ErrorsAreAttributedByMark) {
  Log log;
  Pusher pusher;
  pusher.Submit(Order(&log, "a", absl::OkStatus(), absl::AbortedError("a's wait")));
  const uint64_t first = pusher.Submit(Order(&log, "b", absl::UnavailableError("b's push")));
  const uint64_t second = pusher.Submit(Order(&log, "c", absl::InternalError("c's push")));
  std::string what;
  absl::Status s = pusher.Drain(first - 1, &what);  // through a
  EXPECT_EQ(s.message(), "a's wait");
  EXPECT_EQ(what, "a");
  // Through c: b's error is the first of those not drained before (c's
  // goes with this drain, which returns only its first).
  s = pusher.Drain(second, &what);
  EXPECT_EQ(s.message(), "b's push");
  EXPECT_EQ(what, "b");
  EXPECT_TRUE(pusher.Drain(first).ok()) << "drained through a later mark already";
  EXPECT_TRUE(pusher.Drain(second).ok()) << "each error is reported once";
  EXPECT_TRUE(pusher.Drain().ok());
}

TEST(PusherTest, AMarkPastTheQueueIsRefusedChangingNothing) {
  Log log;
  Pusher pusher;
  pusher.Submit(Order(&log, "a", absl::UnavailableError("gone")));
  for (absl::Status s : {pusher.Drain(2), pusher.WaitThrough(2)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_EQ(s.message(), "mark: 2 is past the 1 pushes queued");
  }
  EXPECT_FALSE(pusher.DoneThrough(2));
  EXPECT_EQ(pusher.Drain().message(), "a: gone");  // still there
}

TEST(PusherTest, SubmitGoesOnDuringAPartialDrain) {
  Log log;
  Pusher pusher;
  absl::Notification first_gate, later_gate;
  const uint64_t mark = pusher.Submit(Gated(&log, "a", &first_gate));
  absl::Notification drained;
  std::thread drainer([&] {
    EXPECT_TRUE(pusher.Drain(mark).ok());
    drained.Notify();
  });
  // Queued while the drain waits; the last one blocks until after it.
  pusher.Submit(Order(&log, "b", absl::UnavailableError("b's push")));
  pusher.Submit(Gated(&log, "c", &later_gate));
  EXPECT_FALSE(drained.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  first_gate.Notify();
  drained.WaitForNotification();  // while c still waits
  drainer.join();
  EXPECT_FALSE(pusher.DoneThrough(3));
  later_gate.Notify();
  EXPECT_EQ(pusher.Drain().message(), "b: b's push");
  EXPECT_EQ(log.events().size(), 6u);
}

// A buffer's next writer waits for its push even while the Drain that
// reports it waits too; it takes no error.
TEST(PusherTest, WaitThroughWaitsForAPushAnotherDrainClaimedAndTakesNoError) {
  Pusher pusher;
  HeldPush held;
  const uint64_t mark = pusher.Submit(held.Order("a"));
  absl::Notification drained;
  absl::Status drain;
  std::thread drainer([&] {
    drain = pusher.Drain(mark);
    drained.Notify();
  });
  EXPECT_FALSE(drained.WaitForNotificationWithTimeout(absl::Milliseconds(20)));  // it claimed a
  absl::Notification waited;
  std::thread waiter([&] {
    EXPECT_TRUE(pusher.WaitThrough(mark).ok());
    waited.Notify();
  });
  EXPECT_FALSE(waited.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  EXPECT_FALSE(pusher.DoneThrough(mark));
  EXPECT_TRUE(pusher.DoneThrough(0));
  held.Finish(absl::UnavailableError("gone"));
  waiter.join();
  drainer.join();
  EXPECT_TRUE(pusher.DoneThrough(mark));
  EXPECT_EQ(drain.message(), "a: gone");
  EXPECT_TRUE(pusher.WaitThrough(mark).ok());  // done and gone: at once
}

TEST(PusherTest, PushNameNamesStepAndRange) {
  EXPECT_EQ(PushName(3, Range{0, 1024}), "push of step 3 [0, 1024)");
}

}  // namespace
}  // namespace zerostate::trainer
