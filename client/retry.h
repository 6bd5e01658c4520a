// Deadlines and retries for every RPC the client makes: each attempt gets a
// fresh context with deadline now + rpc_timeout; UNAVAILABLE and
// DEADLINE_EXCEEDED are retried with exponential backoff and jitter up to
// max_attempts (safe: every RPC of the service is idempotent). The final
// error keeps the gRPC code and names the method and the server.
// Thread-safe.
#pragma once

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "client/metrics.h"
#include "client/server_conn.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace zerostate::client {

// grpc::Status -> absl::Status, same code and message.
absl::Status FromGrpc(const grpc::Status& status);

// True for the codes worth another attempt.
bool IsRetryable(const absl::Status& status);

class Retrier {
 public:
  // `metrics` and `shutdown` must outlive the Retrier. Once `shutdown` is
  // notified, backoff waits end and no further attempt starts (CANCELLED).
  Retrier(const ClientOptions& options, ClientMetrics* metrics,
          const absl::Notification* shutdown);

  // Runs `attempt` (one RPC on `ctx`) until it returns OK, a code that is
  // not retryable, or max_attempts are spent. Records the call's latency
  // and its retries. Errors: the last attempt's code, message prefixed with
  // "<Method> to <address>: " and the attempt count when it was retried.
  absl::Status Run(Method method, const ServerConn& server,
                   absl::FunctionRef<absl::Status(grpc::ClientContext& ctx)> attempt) const;

 private:
  absl::Duration Backoff(int retry) const;

  const ClientOptions& options_;
  ClientMetrics* const metrics_;
  const absl::Notification* const shutdown_;
};

}  // namespace zerostate::client
