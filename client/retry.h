// Deadlines and retries for every RPC the client makes: each attempt gets a
// fresh context with deadline now + rpc_timeout; UNAVAILABLE and
// DEADLINE_EXCEEDED are retried with exponential backoff and jitter up to
// max_attempts, UNAVAILABLE also until unavailable_wait after the call
// began (a server restarting; safe: every RPC of the service is idempotent).
// A call with a failover window (Run's `unavailable_wait`: a replicated
// job's failover_wait) to a server found silent (ServerConn::SilentSince)
// counts its window from the silence if that was earlier, and past it
// makes no attempt, not even a first one: it fails UNAVAILABLE naming the
// cut, and the job fails over at once. The final
// error keeps the gRPC code and names the method and the server.
// Thread-safe.
#pragma once

#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "client/metrics.h"
#include "client/server_conn.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace zerostate::client {

// grpc::Status -> absl::Status, same code and message.
[[nodiscard]] absl::Status FromGrpc(const grpc::Status& status);

// True for the codes worth another attempt.
bool IsRetryable(const absl::Status& status);

// The job token a Client sends with every call (ClientOptions::job_token),
// set once later when the client had none and a server generated one.
// Thread-safe.
class JobToken {
 public:
  explicit JobToken(std::string token) : token_(std::move(token)) {}
  std::string Get() const {
    absl::MutexLock lock(&mu_);
    return token_;
  }
  // Takes `token` if none is set yet (a server generated it).
  void Adopt(const std::string& token) {
    absl::MutexLock lock(&mu_);
    if (token_.empty()) token_ = token;
  }

 private:
  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
};

// The metadata entry that carries the job token.
inline constexpr char kJobTokenMetadata[] = "zerostate-job-token";

class Retrier {
 public:
  // `metrics`, `shutdown` and `token` must outlive the Retrier. Once
  // `shutdown` is notified, backoff waits end and no further attempt starts
  // (CANCELLED). Every attempt carries `token` (when set).
  Retrier(const ClientOptions& options, ClientMetrics* metrics,
          const absl::Notification* shutdown, const JobToken* token);

  // Runs `attempt` (one RPC on `ctx`) until it returns OK, a code that is
  // not retryable, or max_attempts are spent (for UNAVAILABLE: and
  // unavailable_wait has passed since the first attempt). Records the call's latency
  // and its retries. Errors: the last attempt's code, message prefixed with
  // "<Method> to <address>: " and the attempt count when it was retried.
  // `unavailable_wait` replaces the options' for this call (a replicated
  // job's failover_wait).
  [[nodiscard]] absl::Status Run(
      Method method, const ServerConn& server,
      absl::FunctionRef<absl::Status(grpc::ClientContext& ctx)> attempt,
      std::optional<absl::Duration> unavailable_wait = std::nullopt) const;

 private:
  absl::Duration Backoff(int retry) const;

  const ClientOptions& options_;
  ClientMetrics* const metrics_;
  const absl::Notification* const shutdown_;
  const JobToken* const token_;
};

}  // namespace zerostate::client
