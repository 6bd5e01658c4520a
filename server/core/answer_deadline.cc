#include "server/core/answer_deadline.h"

#include <algorithm>

namespace zerostate::server {

absl::Time AnswerDeadline(absl::Time now, absl::Time caller_deadline, absl::Duration max_wait) {
  const absl::Time cap = now + max_wait;
  if (caller_deadline >= cap) return cap;
  const absl::Duration left = std::max(caller_deadline - now, absl::ZeroDuration());
  return caller_deadline - std::min(kMaxAnswerMargin, left * kAnswerMarginFraction);
}

}  // namespace zerostate::server
