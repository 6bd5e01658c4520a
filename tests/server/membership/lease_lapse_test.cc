// LeaseLapse alone (no etcd): when a server may take a name another
// process holds, from the readings of that process's lease, as etcd gives
// them (whole seconds left, rounded down; -1 gone).
#include "server/membership/lease_lapse.h"

#include <gtest/gtest.h>

#include <string>

namespace zerostate::server {
namespace {

using Verdict = LeaseLapse::Verdict;

TEST(LeaseLapseTest, ALeaseNobodyRenewsLapsesAndFreesTheName) {
  LeaseLapse lapse(absl::Seconds(8));
  EXPECT_EQ(lapse.Observe(3, absl::ZeroDuration()), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(2, absl::Milliseconds(900)), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(0, absl::Milliseconds(3500)), Verdict::kWait);
  // Still there past its time by less than etcd's expiry slack: not proof.
  EXPECT_EQ(lapse.Observe(0, absl::Seconds(4) + LeaseLapse::kExpirySlack / 2), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(-1, absl::Milliseconds(4600)), Verdict::kLapsed);
}

TEST(LeaseLapseTest, AGoneLeaseAtTheFirstReadingFreesTheNameEvenWithoutAWait) {
  LeaseLapse lapse(absl::ZeroDuration());
  EXPECT_EQ(lapse.Observe(-1, absl::ZeroDuration()), Verdict::kLapsed);
}

TEST(LeaseLapseTest, ARenewedLeaseIsALiveProcessAndIsRefusedByName) {
  LeaseLapse lapse(absl::Seconds(8));
  EXPECT_EQ(lapse.Observe(3, absl::ZeroDuration()), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(2, absl::Milliseconds(800)), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(3, absl::Milliseconds(1400)), Verdict::kKeptAlive);
  const std::string why = lapse.Refusal("10.0.0.1:7070", "10.0.0.1:7070", 42);
  EXPECT_EQ(why,
            "10.0.0.1:7070 is alive: its lease 42 is kept alive by the process at "
            "10.0.0.1:7070; stop it first, or wait for its lease to lapse");
}

// A TTL of 2 s renewed every 2/3 s reads 1, 1, 1, ...: never a rise, but
// the lease outlives the time it had left.
TEST(LeaseLapseTest, ALeaseThatOutlivesItsTimeLeftWasRenewed) {
  LeaseLapse lapse(absl::Seconds(8));
  EXPECT_EQ(lapse.Observe(1, absl::ZeroDuration()), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(1, absl::Seconds(2)), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(1, absl::Seconds(2) + LeaseLapse::kExpirySlack + absl::Milliseconds(1)),
            Verdict::kKeptAlive);
}

TEST(LeaseLapseTest, ALeaseThatCannotLapseWithinTheWaitIsRefusedAtOnce) {
  LeaseLapse lapse(absl::Seconds(4));
  EXPECT_EQ(lapse.Observe(599, absl::ZeroDuration()), Verdict::kTooLong);
  EXPECT_EQ(lapse.Refusal("a:1", "c:7", 9),
            "a:1 is held by the process at c:7, whose lease 9 has 599 s left and did not lapse "
            "within the wait (4 s); stop it first, or wait for its lease to lapse");
  LeaseLapse none(absl::ZeroDuration());
  EXPECT_EQ(none.Observe(0, absl::ZeroDuration()), Verdict::kTooLong);  // under a second left
}

TEST(LeaseLapseTest, TheWaitEndsBeforeALeaseWithMoreTimeLeftLapses) {
  LeaseLapse lapse(absl::Seconds(3));
  EXPECT_EQ(lapse.Observe(3, absl::ZeroDuration()), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(1, absl::Seconds(2)), Verdict::kWait);
  EXPECT_EQ(lapse.Observe(0, absl::Seconds(3)), Verdict::kTooLong);
}

}  // namespace
}  // namespace zerostate::server
