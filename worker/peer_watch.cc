#include "worker/peer_watch.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerostate::worker {

std::string RankName(const Topology& topo, uint32_t rank) {
  return absl::StrCat("rank ", rank, " (node ", rank / topo.local_size, ", local rank ",
                      rank % topo.local_size, ")");
}

absl::StatusOr<std::unique_ptr<client::Client>> MakeControlClient(client::ClientOptions options,
                                                                  absl::Duration timeout) {
  options.rpc_timeout = std::max(absl::ToChronoMilliseconds(timeout / 3),
                                 std::chrono::milliseconds(1));
  options.max_attempts = 2;  // a rank that comes a little late still meets its partner
  options.metrics = nullptr;
  options.threads = 4;
  return client::Client::Connect(std::move(options));
}

PeerWatch::PeerWatch(client::Client* control, std::string scope, const Topology& topo,
                     absl::Duration timeout, PeerGoneFn on_gone)
    : control_(control),
      scope_(std::move(scope)),
      topo_(topo),
      timeout_(timeout),
      on_gone_(std::move(on_gone)) {
  thread_ = std::thread([this] { Run(); });
}

PeerWatch::~PeerWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void PeerWatch::Enter(uint64_t step, uint32_t epoch) {
  absl::MutexLock lock(&mu_);
  in_step_ = true;
  called_ = false;
  step_ = step;
  epoch_ = epoch;
  entered_ = absl::Now();
}

void PeerWatch::Leave() {
  absl::MutexLock lock(&mu_);
  in_step_ = false;
}

void PeerWatch::Run() {
  while (true) {
    uint64_t step;
    uint32_t epoch;
    {
      absl::MutexLock lock(&mu_);
      // Wakes on stop, or when the current step has lasted a third of `timeout`.
      auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (in_step_ && !called_ && absl::Now() - entered_ >= timeout_ / 3);
      };
      while (!due()) {
        mu_.AwaitWithTimeout(absl::Condition(+[](bool* stop) { return *stop; }, &stop_),
                             absl::Milliseconds(100));
      }
      if (stop_) return;
      called_ = true;
      step = step_;
      epoch = epoch_;
    }
    const std::string gone = RollCall(step, epoch);
    if (!gone.empty()) {
      on_gone_(gone);
      return;
    }
    // Everyone came (a slow step): watch this step again from now.
    absl::MutexLock lock(&mu_);
    if (in_step_ && step_ == step && epoch_ == epoch) {
      called_ = false;
      entered_ = absl::Now();
    }
  }
}

std::string PeerWatch::RollCall(uint64_t step, uint32_t epoch) {
  // Keyed by the roll call's number, not the step: the ranks of a node
  // whose peer died mid-step may still be in the step the others finished.
  const std::string prefix = absl::StrCat(epoch, "/", calls_++, "/");
  const std::string waited = absl::FormatDuration(timeout_);
  if (topo_.rank() != 0) {
    const std::string me = absl::StrCat(topo_.rank());
    auto coordinator_gone = [&](absl::string_view what, const absl::Status& s) {
      return absl::StrCat(RankName(topo_, 0), " (the coordinator) is gone: step ", step,
                          " made no progress for ", waited, " and it did not ", what, " (",
                          s.ToString(), ")");
    };
    auto met = control_->Rendezvous(scope_, absl::StrCat("alive/", prefix, me), 1, 2, "");
    if (!met.ok()) return coordinator_gone("answer a roll call", met.status());
    // The coordinator sends the verdict once it has met or given up on
    // every rank, up to 2/3 of timeout after this meeting; a retry of the
    // same key is answered the same.
    absl::StatusOr<std::vector<std::string>> verdict;
    for (int attempt = 0; attempt < 3; ++attempt) {
      verdict = control_->Rendezvous(scope_, absl::StrCat("verdict/", prefix, me), 1, 2, "");
      if (verdict.ok() || !absl::IsDeadlineExceeded(verdict.status())) break;
    }
    if (!verdict.ok()) return coordinator_gone("send the roll call's verdict", verdict.status());
    return verdict->empty() ? "" : (*verdict)[0];
  }
  const uint32_t world = topo_.world();
  std::vector<absl::Status> met(world);
  {
    std::vector<std::thread> calls;
    for (uint32_t q = 1; q < world; ++q) {
      calls.emplace_back([&, q] {
        met[q] = control_->Rendezvous(scope_, absl::StrCat("alive/", prefix, q), 0, 2, "").status();
      });
    }
    for (auto& t : calls) t.join();
  }
  std::vector<std::string> gone;
  for (uint32_t q = 1; q < world; ++q) {
    if (!met[q].ok()) gone.push_back(RankName(topo_, q));
  }
  std::string message;
  if (!gone.empty()) {
    const bool one = gone.size() == 1;
    message = absl::StrCat(absl::StrJoin(gone, ", "), one ? " is" : " are", " gone: step ", step,
                           " made no progress for ", waited, " and ", one ? "it" : "they",
                           " did not answer the coordinator's roll call");
  }
  std::vector<std::thread> verdicts;
  for (uint32_t q = 1; q < world; ++q) {
    if (!met[q].ok()) continue;
    verdicts.emplace_back([&, q] {
      (void)control_->Rendezvous(scope_, absl::StrCat("verdict/", prefix, q), 0, 2, message);
    });
  }
  for (auto& t : verdicts) t.join();
  return message;
}

}  // namespace zerostate::worker
