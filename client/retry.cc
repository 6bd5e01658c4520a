#include "client/retry.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/timeline.h"

namespace zerostate::client {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

Retrier::Retrier(const ClientOptions& options, ClientMetrics* metrics,
                 const absl::Notification* shutdown, const JobToken* token)
    : options_(options), metrics_(metrics), shutdown_(shutdown), token_(token) {}

absl::Duration Retrier::Backoff(int retry) const {
  absl::Duration base = absl::FromChrono(options_.initial_backoff) * (1 << std::min(retry, 20));
  base = std::min(base, absl::FromChrono(options_.max_backoff));
  // Full jitter in [base/2, base]: clients retrying together spread out.
  absl::BitGen gen;
  return base * absl::Uniform(gen, 0.5, 1.0);
}

absl::Status Retrier::Run(Method method, const ServerConn& server,
                          absl::FunctionRef<absl::Status(grpc::ClientContext&)> attempt,
                          std::optional<absl::Duration> unavailable_wait) const {
  const absl::Duration wait =
      unavailable_wait.value_or(absl::FromChrono(options_.unavailable_wait));
  absl::Time start = absl::Now();
  absl::Status status;
  int attempts = 0;
  const std::string token = token_->Get();
  // A call with a failover window (a replicated job's): a server found
  // silent has been unreachable since before the cut, the window counts
  // from then, and past it no attempt goes to it (one would wait out its
  // deadline, or a connection attempt: its host drops the packets), not
  // even a first one; the caller fails over. Other calls keep their
  // attempts (a channel that only blinked is back within them).
  auto silent_since = [&]() -> std::optional<absl::Time> {
    return unavailable_wait.has_value() ? server.SilentSince() : std::nullopt;
  };
  auto past_window = [&](std::optional<absl::Time> silent) {
    return absl::Now() - (silent.has_value() ? std::min(start, *silent) : start) >= wait;
  };
  while (true) {
    if (std::optional<absl::Time> silent = silent_since();
        silent.has_value() && past_window(silent)) {
      if (attempts == 0) status = server.cutter()->Check();
      if (!status.ok()) break;  // else restored meanwhile: try it
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
    if (!token.empty()) ctx.AddMetadata(kJobTokenMetadata, token);
    status = attempt(ctx);
    ++attempts;
    if (!absl::IsUnavailable(status)) server.MarkAnswered();
    if (status.ok() || !IsRetryable(status)) break;
    const std::optional<absl::Time> silent = silent_since();
    const bool server_may_return = absl::IsUnavailable(status) && !past_window(silent);
    if ((attempts >= options_.max_attempts || silent.has_value()) && !server_may_return) break;
    metrics_->AddRetry(method);
    Timeline::Record("rpc_retry", attempts, static_cast<int64_t>(status.code()));
    if (shutdown_->WaitForNotificationWithTimeout(Backoff(attempts - 1))) {
      status = absl::CancelledError(absl::StrCat("client shut down; last error: ",
                                                 status.message()));
      break;
    }
  }
  metrics_->ObserveSeconds(method, absl::ToDoubleSeconds(absl::Now() - start));
  if (status.ok()) return status;
  std::string retried = attempts > 1 ? absl::StrCat(" (after ", attempts, " attempts)") : "";
  // A transport mismatch (TLS client, plaintext server or the reverse, an
  // untrusted certificate) looks like any connection failure from here;
  // the hint is for a server never reached, not one that went away mid-run.
  std::string hint = absl::IsUnavailable(status) && !server.answered()
                         ? " (is the server up, and do both sides use TLS with a CA the client "
                           "trusts, or both plaintext?)"
                         : "";
  return absl::Status(status.code(), absl::StrCat(MethodName(method), " to ", server.address(),
                                                  retried, ": ", status.message(), hint));
}

}  // namespace zerostate::client
