// The channels and stubs to one state server. Channels get distinct
// arguments and a local subchannel pool, so each is its own TCP
// connection; calls are spread over them round robin.
// Thread-safe; constant after construction but for the round-robin cursor.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "absl/time/time.h"
#include "client/conn_cutter.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::client {

// The arguments of channel `channel` to server `server`: unlimited message
// sizes, large HTTP/2 windows and TCP read chunks, a local subchannel pool,
// then options.channel_args.
grpc::ChannelArguments MakeChannelArguments(const ClientOptions& options, int server,
                                            int channel);

class ServerConn {
 public:
  // Opens options.channels_per_server channels (connected lazily) to
  // options.servers[index] with `credentials`. REQUIRES: options passed
  // ValidateOptions.
  ServerConn(const ClientOptions& options, int index,
             const std::shared_ptr<grpc::ChannelCredentials>& credentials);

  const std::string& address() const { return address_; }
  int index() const { return index_; }

  // The next channel / stub, round robin over the connections.
  grpc::Channel* NextChannel();
  v1::StateService::Stub* NextStub();

  // Whether a call to this server has ever been answered (with any status
  // but UNAVAILABLE): a failure to connect after that is the server going
  // away, not a transport mismatch.
  bool answered() const { return answered_.load(std::memory_order_relaxed); }
  void MarkAnswered() const { answered_.store(true, std::memory_order_relaxed); }

  // The channels (for the client's ChannelWatch), and the cutter of this
  // server's data-plane connections, which every job's pool for this
  // server shares.
  const std::vector<std::shared_ptr<grpc::Channel>>& channels() const { return channels_; }
  const std::shared_ptr<ConnCutter>& cutter() const { return cutter_; }

  // Since when the server is known silent: its channels went unanswered
  // for keepalive_timeout before the ChannelWatch cut it (a host cut off,
  // a hung process), so from keepalive_timeout before the cut; nullopt
  // while not cut. A call to it meanwhile only waits out its deadline
  // (its host drops the packets), so the retries and the failover go by
  // this (client/retry.h, client/failover.cc).
  std::optional<absl::Time> SilentSince() const;

 private:
  const std::string address_;
  const int index_;
  const absl::Duration keepalive_timeout_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::StateService::Stub>> stubs_;
  const std::shared_ptr<ConnCutter> cutter_ = std::make_shared<ConnCutter>();
  std::atomic<uint32_t> next_{0};
  mutable std::atomic<bool> answered_{false};
};

}  // namespace zerostate::client
