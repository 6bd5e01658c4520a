#include "server/core/block_wait.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::Status AwaitBlock(Block& b, const std::atomic<bool>& shutting_down, absl::Time deadline,
                        const std::function<bool()>& pred, const std::function<std::string()>& what,
                        const std::function<bool()>& cancelled) {
  std::function<bool()> ready = [&] { return shutting_down.load() || pred(); };
  bool ok = false;
  while (true) {
    const absl::Time until = cancelled ? std::min(deadline, absl::Now() + kCancelPoll) : deadline;
    ok = b.mu.AwaitWithDeadline(absl::Condition(&ready), until);
    if (ok || until == deadline) break;
    b.mu.Unlock();  // asked without the block's mutex: it may ask the network
    const bool gone = cancelled();
    b.mu.Lock();
    if (gone) return absl::CancelledError(absl::StrCat("cancelled by the caller: ", what()));
  }
  if (shutting_down.load()) return absl::UnavailableError("server is shutting down");
  if (!ok) return absl::DeadlineExceededError(what());
  return absl::OkStatus();
}

}  // namespace zerostate::server
