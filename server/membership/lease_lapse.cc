#include "server/membership/lease_lapse.h"

#include "absl/strings/str_cat.h"

namespace zerostate::server {

LeaseLapse::Verdict LeaseLapse::Observe(int64_t seconds_left, absl::Duration elapsed) {
  const bool first = first_ == -2;
  if (first) first_ = seconds_left;
  const int64_t previous = last_;
  last_ = seconds_left;
  if (seconds_left < 0) {
    verdict_ = Verdict::kLapsed;
  } else if (first && absl::Seconds(seconds_left) > wait_) {
    verdict_ = Verdict::kTooLong;
  } else if (!first && seconds_left > previous) {
    verdict_ = Verdict::kKeptAlive;
  } else if (elapsed > absl::Seconds(first_ + 1) + kExpirySlack) {
    verdict_ = Verdict::kKeptAlive;
  } else if (elapsed >= wait_) {
    verdict_ = Verdict::kTooLong;
  } else {
    verdict_ = Verdict::kWait;
  }
  return verdict_;
}

std::string LeaseLapse::Refusal(const std::string& name, const std::string& holder,
                                int64_t lease) const {
  const std::string what = verdict_ == Verdict::kKeptAlive
                               ? absl::StrCat(name, " is alive: its lease ", lease,
                                              " is kept alive by the process at ", holder)
                               : absl::StrCat(name, " is held by the process at ", holder,
                                              ", whose lease ", lease, " has ", last_,
                                              " s left and did not lapse within the wait (",
                                              absl::ToInt64Seconds(wait_), " s)");
  return absl::StrCat(what, "; stop it first, or wait for its lease to lapse");
}

}  // namespace zerostate::server
