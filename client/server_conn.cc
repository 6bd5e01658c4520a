#include "client/server_conn.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace zerostate::client {

grpc::ChannelArguments MakeChannelArguments(const ClientOptions& options, int server,
                                            int channel) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A private subchannel pool plus an argument unique to the channel: gRPC
  // would otherwise share one TCP connection among equal channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("zerostate.channel_index", server * 1024 + channel);
  // Start with windows large enough for several chunks in flight instead of
  // waiting for the BDP probe to grow them.
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 1);
  args.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 4 << 20);
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20);
  args.SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20);
  // Reconnect to a restarted server on the client's own backoff schedule,
  // not gRPC's default (1 s growing to 120 s), and re-resolve the address
  // as often (default: at most every 30 s), so retries can reach it.
  int initial_ms = static_cast<int>(std::max<int64_t>(options.initial_backoff.count(), 10));
  int max_ms = static_cast<int>(std::max<int64_t>(options.max_backoff.count(), initial_ms));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, initial_ms);
  if (options.keepalive_time.count() > 0) {
    const int time_ms = static_cast<int>(options.keepalive_time.count());
    const int timeout_ms = static_cast<int>(options.keepalive_timeout.count());
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, time_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, timeout_ms);
    // Pings while no call is open (the data plane may be busy with the
    // server meanwhile) and during a call that sends nothing for long (a
    // Step while the server's pass runs), not just the default two.
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    // A hung server accepts the TCP connection (its kernel does) and never
    // completes HTTP/2's: bound the connection attempt (gRPC's default:
    // 20 s), so that calls fail and fail over instead of waiting it out.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::max(2000, time_ms + timeout_ms));
    // Never idle on its own (gRPC's default: after 30 minutes without a
    // call, which a rank that only pushes and gathers on the data plane
    // reaches): a channel that leaves READY has lost its server, and the
    // ChannelWatch cuts that server's data plane.
    args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, std::numeric_limits<int>::max());
  }
  for (const auto& [name, value] : options.channel_args) args.SetInt(name, value);
  return args;
}

namespace {

std::vector<grpc::ChannelArguments> ArgumentsOf(const ClientOptions& options, int server) {
  std::vector<grpc::ChannelArguments> args;
  for (int c = 0; c < options.channels_per_server; ++c) {
    args.push_back(MakeChannelArguments(options, server, c));
  }
  return args;
}

}  // namespace

ServerConn::ServerConn(const ClientOptions& options, int index,
                       const std::shared_ptr<grpc::ChannelCredentials>& credentials)
    : index_(index),
      keepalive_timeout_(absl::FromChrono(options.keepalive_timeout)),
      credentials_(credentials),
      channel_args_(ArgumentsOf(options, index)),
      current_(Dial(options.servers[index])) {}

std::shared_ptr<ServerConn::Dialled> ServerConn::Dial(const std::string& address) const {
  auto d = std::make_shared<Dialled>();
  d->address = address;
  for (const grpc::ChannelArguments& args : channel_args_) {
    d->channels.push_back(grpc::CreateCustomChannel(address, credentials_, args));
    d->stubs.push_back(v1::StateService::NewStub(d->channels.back()));
  }
  return d;
}

std::shared_ptr<ServerConn::Dialled> ServerConn::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::string ServerConn::address() const { return Current()->address; }

std::vector<std::shared_ptr<grpc::Channel>> ServerConn::channels() const {
  return Current()->channels;
}

bool ServerConn::Repoint(const std::string& address) {
  if (Current()->address == address) return false;
  std::shared_ptr<Dialled> fresh = Dial(address);  // outside the lock
  {
    absl::MutexLock lock(&mu_);
    if (current_->address == address) return false;  // another call moved it
    replaced_.push_back(std::exchange(current_, std::move(fresh)));
  }
  cutter_->Restore();
  return true;
}

std::optional<absl::Time> ServerConn::SilentSince() const {
  std::optional<absl::Time> cut = cutter_->CutSince();
  if (!cut.has_value()) return std::nullopt;
  return *cut - keepalive_timeout_;
}

grpc::Channel* ServerConn::NextChannel() {
  std::shared_ptr<Dialled> d = Current();
  return d->channels[next_.fetch_add(1, std::memory_order_relaxed) % d->channels.size()].get();
}

v1::StateService::Stub* ServerConn::NextStub() {
  std::shared_ptr<Dialled> d = Current();
  return d->stubs[next_.fetch_add(1, std::memory_order_relaxed) % d->stubs.size()].get();
}

}  // namespace zerostate::client
