// A minimal etcd v3 client over gRPC (the messages of etcd_rpc.proto): the
// KV calls, leases and a watch stream, which is all EtcdMembership needs.
// etcd offers no C++ client in Debian; this one is small on purpose.
//
// Endpoints are tried in order: a call that finds its endpoint unreachable
// (UNAVAILABLE or its deadline) moves on to the next, and later calls start
// from the one that last answered. Every call has a deadline
// (EtcdClientOptions::call_timeout). Errors name the endpoint, the call and
// the key: "etcd at 127.0.0.1:2379: Range '/zerostate/c/members/': ...";
// an endpoint that cannot be reached is UNAVAILABLE, its deadline included.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/membership/etcd_rpc.grpc.pb.h"

namespace zerostate::server {

struct EtcdClientOptions {
  // "host:port" or "http://host:port", one or more. https (TLS to etcd) is
  // not supported yet and is refused.
  std::vector<std::string> endpoints;
  // Deadline of each unary call on one endpoint.
  absl::Duration call_timeout = absl::Seconds(2);
};

// The key just past every key that starts with `prefix` (etcd's range_end
// for a prefix). REQUIRES: prefix is not empty and not all 0xff bytes.
std::string PrefixEnd(const std::string& prefix);

// A comma-separated list of endpoints (--etcd_endpoints) split into one
// per entry, blanks dropped.
std::vector<std::string> SplitEndpoints(const std::string& list);

class EtcdWatch;

class EtcdClient {
 public:
  // Checks the endpoints (INVALID_ARGUMENT naming a bad one) and makes a
  // channel to each; connects lazily, so an unreachable etcd shows in the
  // first call.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      const EtcdClientOptions& options);

  // The endpoint calls go to first now.
  std::string endpoint() const;

  // The keys in [key, range_end) (range_end "" : just `key`).
  [[nodiscard]] absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const std::string& key, const std::string& range_end = "");
  [[nodiscard]] absl::StatusOr<etcdserverpb::PutResponse> Put(const std::string& key,
                                                              const std::string& value,
                                                              int64_t lease = 0);
  [[nodiscard]] absl::StatusOr<etcdserverpb::DeleteRangeResponse> Delete(const std::string& key);
  // `key` names the transaction in errors (its first compared key).
  [[nodiscard]] absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request, const std::string& key);

  // A new lease of `ttl_seconds`; the answer has its id and the TTL etcd
  // granted (it may raise a short one to its minimum).
  [[nodiscard]] absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(int64_t ttl_seconds);
  // Revokes lease `id`: etcd deletes its keys at once. NOT_FOUND when etcd
  // no longer has it.
  [[nodiscard]] absl::Status LeaseRevoke(int64_t id);
  // One keepalive of lease `id` on a stream of its own, within `timeout`:
  // the TTL etcd renewed it to; 0 when etcd no longer has the lease.
  [[nodiscard]] absl::StatusOr<int64_t> KeepAliveOnce(int64_t id, absl::Duration timeout);
  // Whole seconds lease `id` has left (rounded down: 0 is under a
  // second); -1 when etcd no longer has it (expired or revoked).
  [[nodiscard]] absl::StatusOr<int64_t> LeaseTimeToLive(int64_t id);

  // Opens a watch of every key that starts with `prefix`, from
  // `start_revision` (inclusive), its events carrying the previous value;
  // returns once etcd has created it (within call_timeout).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<EtcdWatch>> Watch(const std::string& prefix,
                                                                 int64_t start_revision);

 private:
  struct Endpoint {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  };
  explicit EtcdClient(EtcdClientOptions options);
  // Calls `call(endpoint, context)` on each endpoint in turn from the
  // current one, until one answers (any answer but UNAVAILABLE or a
  // deadline); the error names the endpoint, `what` and `key`.
  template <typename Call>
  [[nodiscard]] absl::Status OnEndpoints(const std::string& what, const std::string& key,
                                         Call call);
  // One unary call through OnEndpoints: `call(endpoint, context, &answer)`.
  template <typename Resp, typename Call>
  [[nodiscard]] absl::StatusOr<Resp> Ask(const std::string& what, const std::string& key,
                                         Call call);
  std::unique_ptr<grpc::ClientContext> NewContext(absl::Duration timeout) const;

  const EtcdClientOptions options_;
  std::vector<Endpoint> endpoints_;  // constant after construction
  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
};

// A watch stream, read by one thread; Cancel may come from any other.
class EtcdWatch {
 public:
  ~EtcdWatch();  // cancels and finishes the stream

  // The next batch of events; blocks until one comes. Errors: the stream
  // ended (etcd unreachable, cancelled, or the watch cancelled by etcd, e.g.
  // its start revision compacted away: FAILED_PRECONDITION), naming the
  // endpoint.
  [[nodiscard]] absl::StatusOr<etcdserverpb::WatchResponse> Next();
  // Ends the stream: a Next waiting now, or later, returns CANCELLED.
  void Cancel();

 private:
  friend class EtcdClient;
  EtcdWatch(std::string endpoint, std::string prefix);
  [[nodiscard]] absl::Status Finish(const std::string& what);

  const std::string endpoint_;
  const std::string prefix_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
      stream_;
};

}  // namespace zerostate::server
