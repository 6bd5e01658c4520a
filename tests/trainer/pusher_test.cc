// trainer::Pusher in process, without a network: the pushes are tickets
// the test makes (completed, or completed with an error).
#include "trainer/engine/pusher.h"

#include <gtest/gtest.h>

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

TEST(PusherTest, PushNameNamesStepAndRange) {
  EXPECT_EQ(PushName(3, Range{0, 1024}), "push of step 3 [0, 1024)");
}

}  // namespace
}  // namespace zerostate::trainer
