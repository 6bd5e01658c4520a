// Watches the gRPC channels of a Client's servers and turns a lost
// connection into a cut of that server's data plane (client/conn_cutter.h):
// when a channel that was READY leaves READY (a keepalive ping went
// unanswered, or the server closed or reset the connection), the server's
// data-plane connections are shut down and new ones refused; once one of
// its channels is READY again, they are allowed again. While cut, the
// watch asks the server's channels to connect, so the cut ends as soon as
// the server answers.
//
// gRPC offers no state-change wait that can be cancelled at once, so the
// watch reads the channels' states every `period` on its own thread. It
// waits for each period in a state-change watch of every channel, which
// makes its thread poll the channels' connections meanwhile: a channel
// with no call open is otherwise polled only by gRPC's backup poller
// (every 5 s), so a keepalive ping's answer would go unread and the
// keepalive would end the connection of a server that answered (a trainer
// waiting on one server's data plane would see every idle server "lost").
// Thread-safe; the destructor stops the thread within a period.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/server_conn.h"
#include "grpcpp/completion_queue.h"

namespace zerostate::client {

class ChannelWatch {
 public:
  // Watches `servers` (which must outlive this object).
  ChannelWatch(const std::vector<std::unique_ptr<ServerConn>>& servers, absl::Duration period);
  ~ChannelWatch();
  ChannelWatch(const ChannelWatch&) = delete;
  ChannelWatch& operator=(const ChannelWatch&) = delete;

 private:
  void Run();
  // Waits about `period_` for the channels' states to change, polling their
  // connections meanwhile.
  void Poll();
  // One look at `server`'s channels; `ready[c]`: channel c was READY.
  void Look(ServerConn& server, std::vector<bool>& ready);

  const std::vector<std::unique_ptr<ServerConn>>& servers_;
  const absl::Duration period_;
  absl::Notification stop_;
  grpc::CompletionQueue cq_;
  std::thread thread_;
};

}  // namespace zerostate::client
