// When a call that waits must answer: a margin before its caller's deadline.
//
// A call that waits (Step and GradStats for gradients, Gather for a
// version, a push for staging memory, Rendezvous) fails with an error naming
// what it still waits for (the missing nodes, the block's version). Waiting
// until the caller's own deadline would make that answer race the caller's
// timer, which nearly always wins: the caller saw a bare DEADLINE_EXCEEDED.
// So the server gives up kAnswerMarginFraction of the remaining time, at
// most kMaxAnswerMargin, before the caller's deadline; the answer then
// arrives while the caller still listens.
//
// The margin also bounds when a Step may take effect: a Step decides to
// apply (JobStep::Step) only before its answer deadline, so a Step whose caller
// saw it time out was not applied after the caller gave up.
#pragma once

#include "absl/time/time.h"

namespace zerostate::server {

inline constexpr double kAnswerMarginFraction = 0.1;
inline constexpr absl::Duration kMaxAnswerMargin = absl::Seconds(1);

// The time by which a call received at `now` with the caller's deadline
// `caller_deadline` (absl::InfiniteFuture() for none) must answer:
// caller_deadline - min(kMaxAnswerMargin, 10% of caller_deadline - now),
// and never later than now + max_wait (the server's own cap on any wait).
// A caller deadline already past gives a time in the past (no wait at all).
absl::Time AnswerDeadline(absl::Time now, absl::Time caller_deadline, absl::Duration max_wait);

}  // namespace zerostate::server
