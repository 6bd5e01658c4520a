#include "server/membership/etcd_client.h"

#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/rpc_status.h"

namespace zerostate::server {
namespace {

using etcdserverpb::WatchRequest;
using etcdserverpb::WatchResponse;

// Why these channel settings: the default reconnect backoff grows to 120 s,
// so a member cut off from etcd for a while would stay away long after the
// network healed (and lose its lease meanwhile). Keepalive pings find a
// connection that silently died (a partition), so that a watch waiting on
// it ends. etcd answers pings more often than its --grpc-keepalive-min-time
// (5 s) or without a stream open with GOAWAY, so: every 10 s, and only
// while a call is open (the watch always is).
grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

// "host:port" from "host:port" or "http://host:port".
absl::StatusOr<std::string> ParseEndpoint(std::string e) {
  e = std::string(absl::StripAsciiWhitespace(e));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("etcd_endpoints: '", e, "' ", why));
  };
  if (absl::StartsWith(e, "https://")) {
    return bad("asks for TLS, which zerostate's etcd client does not speak yet; use http://");
  }
  std::string hostport = absl::StartsWith(e, "http://") ? e.substr(7) : e;
  while (!hostport.empty() && hostport.back() == '/') hostport.pop_back();
  size_t colon = hostport.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return bad("is not host:port or http://host:port");
  }
  return hostport;
}

bool Unreachable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

absl::Status Named(const std::string& endpoint, const std::string& what, const std::string& key,
                   const grpc::Status& s) {
  auto code = Unreachable(s) ? absl::StatusCode::kUnavailable
                             : static_cast<absl::StatusCode>(s.error_code());
  return absl::Status(
      code, absl::StrCat("etcd at ", endpoint, ": ", what, " '", key, "': ", s.error_message()));
}

}  // namespace

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(end.back() + 1);
  return end;
}

std::vector<std::string> SplitEndpoints(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view e : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(e));
  }
  return out;
}

EtcdClient::EtcdClient(EtcdClientOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdClientOptions& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd_endpoints: no endpoint given");
  }
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd call timeout must be more than 0");
  }
  std::unique_ptr<EtcdClient> c(new EtcdClient(options));
  for (const std::string& e : options.endpoints) {
    auto address = ParseEndpoint(e);
    if (!address.ok()) return address.status();
    Endpoint ep;
    ep.address = *address;
    ep.channel =
        grpc::CreateCustomChannel(ep.address, grpc::InsecureChannelCredentials(), ChannelArgs());
    ep.kv = etcdserverpb::KV::NewStub(ep.channel);
    ep.lease = etcdserverpb::Lease::NewStub(ep.channel);
    ep.watch = etcdserverpb::Watch::NewStub(ep.channel);
    c->endpoints_.push_back(std::move(ep));
  }
  return c;
}

std::string EtcdClient::endpoint() const {
  absl::MutexLock lock(&mu_);
  return endpoints_[current_].address;
}

std::unique_ptr<grpc::ClientContext> EtcdClient::NewContext(absl::Duration timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

template <typename Call>
absl::Status EtcdClient::OnEndpoints(const std::string& what, const std::string& key, Call call) {
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = current_;
  }
  grpc::Status s;
  size_t i = first;
  for (size_t tried = 0; tried < endpoints_.size(); ++tried, i = (i + 1) % endpoints_.size()) {
    auto ctx = NewContext(options_.call_timeout);
    s = call(endpoints_[i], ctx.get());
    if (!Unreachable(s)) {
      absl::MutexLock lock(&mu_);
      current_ = i;
      break;
    }
  }
  if (s.ok()) return absl::OkStatus();
  if (Unreachable(s)) i = (i + endpoints_.size() - 1) % endpoints_.size();  // the last one tried
  return Named(endpoints_[i].address, what, key, s);
}

template <typename Resp, typename Call>
absl::StatusOr<Resp> EtcdClient::Ask(const std::string& what, const std::string& key, Call call) {
  Resp resp;
  auto st = OnEndpoints(
      what, key, [&](Endpoint& ep, grpc::ClientContext* ctx) { return call(ep, ctx, &resp); });
  if (!st.ok()) return st;
  return resp;
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(const std::string& key,
                                                              const std::string& range_end) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  return Ask<etcdserverpb::RangeResponse>("Range", key, [&](Endpoint& ep, auto* ctx, auto* resp) {
    return ep.kv->Range(ctx, req, resp);
  });
}

absl::StatusOr<etcdserverpb::PutResponse> EtcdClient::Put(const std::string& key,
                                                          const std::string& value, int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  return Ask<etcdserverpb::PutResponse>(
      "Put", key, [&](Endpoint& ep, auto* ctx, auto* resp) { return ep.kv->Put(ctx, req, resp); });
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  return Ask<etcdserverpb::DeleteRangeResponse>(
      "DeleteRange", key,
      [&](Endpoint& ep, auto* ctx, auto* resp) { return ep.kv->DeleteRange(ctx, req, resp); });
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request,
                                                          const std::string& key) {
  return Ask<etcdserverpb::TxnResponse>("Txn", key, [&](Endpoint& ep, auto* ctx, auto* resp) {
    return ep.kv->Txn(ctx, request, resp);
  });
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  auto resp = Ask<etcdserverpb::LeaseGrantResponse>(
      "LeaseGrant", absl::StrCat("TTL ", ttl_seconds, " s"),
      [&](Endpoint& ep, auto* ctx, auto* r) { return ep.lease->LeaseGrant(ctx, req, r); });
  if (resp.ok() && (!resp->error().empty() || resp->id() == 0)) {
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint(), ": LeaseGrant refused: ",
                                               resp->error().empty() ? "no id" : resp->error()));
  }
  return resp;
}

absl::Status EtcdClient::LeaseRevoke(int64_t id) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(id);
  return Ask<etcdserverpb::LeaseRevokeResponse>(
             "LeaseRevoke", absl::StrCat("lease ", id),
             [&](Endpoint& ep, auto* ctx, auto* r) { return ep.lease->LeaseRevoke(ctx, req, r); })
      .status();
}

absl::StatusOr<int64_t> EtcdClient::KeepAliveOnce(int64_t id, absl::Duration timeout) {
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse resp;
  auto st = OnEndpoints(
      "LeaseKeepAlive", absl::StrCat("lease ", id), [&](Endpoint& ep, grpc::ClientContext* ctx) {
        ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
        auto stream = ep.lease->LeaseKeepAlive(ctx);
        bool answered = stream->Write(req) && stream->Read(&resp);
        stream->WritesDone();
        if (answered) ctx->TryCancel();  // the answer is in; do not wait for the stream's end
        grpc::Status s = stream->Finish();
        if (answered) return grpc::Status::OK;
        return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream ended") : s;
      });
  if (!st.ok()) return st;
  return resp.ttl();
}

absl::StatusOr<int64_t> EtcdClient::LeaseTimeToLive(int64_t id) {
  etcdserverpb::LeaseTimeToLiveRequest req;
  req.set_id(id);
  auto resp = Ask<etcdserverpb::LeaseTimeToLiveResponse>(
      "LeaseTimeToLive", absl::StrCat("lease ", id),
      [&](Endpoint& ep, auto* ctx, auto* r) { return ep.lease->LeaseTimeToLive(ctx, req, r); });
  if (absl::IsNotFound(resp.status())) return -1;
  if (!resp.ok()) return resp.status();
  return resp->ttl() < 0 ? -1 : resp->ttl();
}

absl::StatusOr<std::unique_ptr<EtcdWatch>> EtcdClient::Watch(const std::string& prefix,
                                                             int64_t start_revision) {
  Endpoint* ep;
  {
    absl::MutexLock lock(&mu_);
    ep = &endpoints_[current_];
    // The next watch (a reconnect after this one fails) tries the next one.
    current_ = (current_ + 1) % endpoints_.size();
  }
  std::unique_ptr<EtcdWatch> w(new EtcdWatch(ep->address, prefix));
  w->stream_ = ep->watch->Watch(&w->context_);
  WatchRequest req;
  auto* create = req.mutable_create_request();
  create->set_key(prefix);
  create->set_range_end(PrefixEnd(prefix));
  create->set_start_revision(start_revision);
  create->set_prev_kv(true);
  // No deadline on the stream (it lives long): a created answer that does
  // not come within call_timeout cancels it from a timer thread.
  absl::Notification created;
  bool timed_out = false;
  std::thread timer([&] {
    if (created.WaitForNotificationWithTimeout(options_.call_timeout)) return;
    timed_out = true;
    w->Cancel();
  });
  WatchResponse resp;
  bool ok = w->stream_->Write(req) && w->stream_->Read(&resp);
  created.Notify();
  timer.join();
  if (!ok) {
    w->Cancel();
    absl::Status st = w->Finish("Watch");
    if (!timed_out) return st;
    return absl::UnavailableError(absl::StrCat("etcd at ", ep->address, ": Watch '", prefix,
                                               "': not created within ",
                                               absl::FormatDuration(options_.call_timeout)));
  }
  {
    absl::MutexLock lock(&mu_);
    current_ = ep - endpoints_.data();  // it answered: stay on it
  }
  if (!resp.created() || resp.canceled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd at ", ep->address, ": Watch '", prefix, "' not created: ", resp.cancel_reason(),
        " (compacted to revision ", resp.compact_revision(), ")"));
  }
  return w;
}

EtcdWatch::EtcdWatch(std::string endpoint, std::string prefix)
    : endpoint_(std::move(endpoint)), prefix_(std::move(prefix)) {}

EtcdWatch::~EtcdWatch() {
  if (stream_) {
    Cancel();
    (void)stream_->Finish();
  }
}

void EtcdWatch::Cancel() { context_.TryCancel(); }

absl::Status EtcdWatch::Finish(const std::string& what) {
  grpc::Status s = stream_->Finish();
  stream_.reset();
  if (s.ok()) s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended");
  return Named(endpoint_, what, prefix_, s);
}

absl::StatusOr<etcdserverpb::WatchResponse> EtcdWatch::Next() {
  if (!stream_) return absl::CancelledError(absl::StrCat("etcd watch '", prefix_, "' ended"));
  WatchResponse resp;
  if (!stream_->Read(&resp)) return Finish("Watch");
  if (resp.canceled()) {
    Cancel();
    (void)stream_->Finish();
    stream_.reset();
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd at ", endpoint_, ": Watch '", prefix_, "' cancelled by etcd: ", resp.cancel_reason(),
        " (compacted to revision ", resp.compact_revision(), ")"));
  }
  return resp;
}

}  // namespace zerostate::server
