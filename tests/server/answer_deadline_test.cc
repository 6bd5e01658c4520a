// When a waiting call answers: a margin before its caller's deadline.
#include "server/core/answer_deadline.h"

#include <gtest/gtest.h>

namespace zerostate::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1000000);
const absl::Duration kMaxWait = absl::Minutes(10);

TEST(AnswerDeadlineTest, TenPercentOfTheTimeLeftAtMostOneSecondBeforeTheCallers) {
  // 10% of 2 s: 0.2 s before.
  EXPECT_EQ(AnswerDeadline(kNow, kNow + absl::Seconds(2), kMaxWait),
            kNow + absl::Milliseconds(1800));
  // 10% of 60 s is 6 s, more than the 1 s cap.
  EXPECT_EQ(AnswerDeadline(kNow, kNow + absl::Seconds(60), kMaxWait), kNow + absl::Seconds(59));
}

TEST(AnswerDeadlineTest, NoDeadlineOrALaterOneWaitsTheServersCap) {
  EXPECT_EQ(AnswerDeadline(kNow, absl::InfiniteFuture(), kMaxWait), kNow + kMaxWait);
  EXPECT_EQ(AnswerDeadline(kNow, kNow + absl::Hours(2), kMaxWait), kNow + kMaxWait);
}

TEST(AnswerDeadlineTest, ADeadlineAlreadyPastDoesNotWait) {
  EXPECT_EQ(AnswerDeadline(kNow, kNow - absl::Seconds(1), kMaxWait), kNow - absl::Seconds(1));
  EXPECT_LE(AnswerDeadline(kNow, kNow, kMaxWait), kNow);
}

}  // namespace
}  // namespace zerostate::server
