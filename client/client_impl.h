// What a Client holds: options, connections to every server, the retry
// policy, metrics and the client's thread pool. JobClients share it (by
// shared_ptr), so a Client may be destroyed before its JobClients.
// Thread-safe; constant after construction (a ServerConn may move: Repoint).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "client/call_cancel.h"
#include "client/channel_watch.h"
#include "client/client.h"
#include "client/metrics.h"
#include "client/retry.h"
#include "client/server_conn.h"
#include "client/shared_buffer.h"
#include "client/thread_pool.h"

namespace zerostate::client {

class Client::Impl {
 public:
  // REQUIRES: options passed ValidateOptions; `credentials` built from
  // them (ChannelCredentialsFor).
  Impl(ClientOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials);
  // Ends backoff waits, then finishes queued tasks and joins the pool.
  ~Impl();

  const ClientOptions& options() const { return options_; }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  ServerConn& server(int shard) { return *servers_[shard]; }
  // Where each server is dialled now (ServerConn::address), in server order.
  std::vector<std::string> addresses() const {
    std::vector<std::string> all;
    for (const auto& s : servers_) all.push_back(s->address());
    return all;
  }
  // Each server's data-plane cutter (ServerConn::cutter), in server order.
  std::vector<std::shared_ptr<ConnCutter>> cutters() const {
    std::vector<std::shared_ptr<ConnCutter>> all;
    for (const auto& s : servers_) all.push_back(s->cutter());
    return all;
  }
  ClientMetrics& metrics() { return metrics_; }
  // The buffers Client::AllocateShared made (client/shared_buffer.h).
  SharedBuffers& shared_buffers() { return shared_buffers_; }
  const Retrier& retrier() const { return retrier_; }
  // The token every call carries (ClientOptions::job_token, or adopted).
  JobToken& job_token() { return token_; }
  // Push and init streams run on pool(); gather streams on gather_pool(),
  // since a gather waiting for a version holds its thread until the Step
  // that brings it, which needs every push to get through first.
  ThreadPool& pool() { return *pool_; }
  ThreadPool& gather_pool() { return *gather_pool_; }
  // Every server shares this host, over the same-host plane: gathers are
  // planned and pooled for the servers' direct copies (data_streams.h).
  bool gathers_in_place() const { return gathers_in_place_; }

  // Runs fn(shard) for every server at once and waits for all: shard 0 on
  // the calling thread, the others on the control pool, whose threads run
  // nothing else (never queued behind the pool's streams) and are started
  // once, with the client. The calling thread also takes shards no pool
  // thread has taken yet, so fan-outs of several threads at once share the
  // pool without ever waiting for each other's threads. Returns the error
  // of the lowest shard that failed.
  [[nodiscard]] absl::Status ForEachServer(absl::FunctionRef<absl::Status(int shard)> fn);

  // One unary RPC to server `shard` through the retrier, e.g.
  // Unary(Method::kStep, 0, &v1::StateService::Stub::Step, req, &resp).
  // `unavailable_wait` as Retrier::Run's. With `cancel`, its Cancel ends
  // the call at once (CANCELLED with its reason, not retried).
  template <class Request, class Response>
  [[nodiscard]] absl::Status Unary(Method method, int shard,
                                   grpc::Status (v1::StateService::Stub::*rpc)(grpc::ClientContext*,
                                                                               const Request&,
                                                                               Response*),
                                   const Request& request, Response* response,
                                   std::optional<absl::Duration> unavailable_wait = std::nullopt,
                                   CallCancel* cancel = nullptr) {
    ServerConn& conn = server(shard);
    return retrier_.Run(
        method, conn,
        [&](grpc::ClientContext& ctx) {
          if (cancel == nullptr) return FromGrpc((conn.NextStub()->*rpc)(&ctx, request, response));
          if (absl::Status s = cancel->Check(); !s.ok()) return s;
          CallCancel::Registration interrupt = cancel->OnCancel([&ctx] { ctx.TryCancel(); });
          return cancel->Explain(FromGrpc((conn.NextStub()->*rpc)(&ctx, request, response)));
        },
        unavailable_wait);
  }

 private:
  const ClientOptions options_;
  ClientMetrics metrics_;
  SharedBuffers shared_buffers_;
  std::vector<std::unique_ptr<ServerConn>> servers_;
  // Cuts a server's data plane when its channels are lost (keepalive on
  // and the data plane in use; else null).
  std::unique_ptr<ChannelWatch> watch_;
  absl::Notification shutdown_;
  JobToken token_;
  Retrier retrier_;
  const bool gathers_in_place_;
  std::unique_ptr<ThreadPool> pool_;         // last: joined first
  std::unique_ptr<ThreadPool> gather_pool_;
  std::unique_ptr<ThreadPool> control_pool_;  // ForEachServer's
};

}  // namespace zerostate::client
