// The channels and stubs to one state server. Channels get distinct
// arguments and a local subchannel pool, so each is its own TCP
// connection; calls are spread over them round robin. The server is the
// one at options.servers[index] (its name) until Repoint moves the
// connection to where a replacement of it listens.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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

  // Where the server is dialled now: options.servers[index], or the
  // address of the last Repoint.
  std::string address() const ABSL_LOCKS_EXCLUDED(mu_);
  int index() const { return index_; }

  // The next channel / stub, round robin over the connections. Valid as
  // long as this object (a Repoint keeps the ones it replaced).
  grpc::Channel* NextChannel() ABSL_LOCKS_EXCLUDED(mu_);
  v1::StateService::Stub* NextStub() ABSL_LOCKS_EXCLUDED(mu_);

  // Moves the connection to `address` (a replacement of the server came
  // up there, JobStatusRequest.locate): new channels and stubs for the
  // calls from now on; those made before stay open for calls in flight,
  // until this object goes. The data plane's cut (cutter) is lifted: it
  // was of the old address. False, changing nothing, when it is dialled
  // at `address` already.
  bool Repoint(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a call to this server has ever been answered (with any status
  // but UNAVAILABLE): a failure to connect after that is the server going
  // away, not a transport mismatch.
  bool answered() const { return answered_.load(std::memory_order_relaxed); }
  void MarkAnswered() const { answered_.store(true, std::memory_order_relaxed); }

  // The channels (for the client's ChannelWatch), and the cutter of this
  // server's data-plane connections, which every job's pool for this
  // server shares.
  std::vector<std::shared_ptr<grpc::Channel>> channels() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::shared_ptr<ConnCutter>& cutter() const { return cutter_; }

  // Since when the server is known silent: its channels went unanswered
  // for keepalive_timeout before the ChannelWatch cut it (a host cut off,
  // a hung process), so from keepalive_timeout before the cut; nullopt
  // while not cut. A call to it meanwhile only waits out its deadline
  // (its host drops the packets), so the retries and the failover go by
  // this (client/retry.h, client/failover.cc).
  std::optional<absl::Time> SilentSince() const;

 private:
  // The channels and stubs to one address.
  struct Dialled {
    std::string address;
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<v1::StateService::Stub>> stubs;
  };
  // Channels to `address`, one per channel_args_ entry.
  std::shared_ptr<Dialled> Dial(const std::string& address) const;
  std::shared_ptr<Dialled> Current() const ABSL_LOCKS_EXCLUDED(mu_);

  const int index_;
  const absl::Duration keepalive_timeout_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const std::vector<grpc::ChannelArguments> channel_args_;  // one per channel
  mutable absl::Mutex mu_;
  std::shared_ptr<Dialled> current_ ABSL_GUARDED_BY(mu_);
  // Those Repoint replaced: a call in flight may still use their stubs.
  std::vector<std::shared_ptr<Dialled>> replaced_ ABSL_GUARDED_BY(mu_);
  const std::shared_ptr<ConnCutter> cutter_ = std::make_shared<ConnCutter>();
  std::atomic<uint32_t> next_{0};
  mutable std::atomic<bool> answered_{false};
};

}  // namespace zerostate::client
