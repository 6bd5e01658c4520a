#include "client/channel_watch.h"

#include "absl/strings/str_cat.h"
#include "common/timeline.h"

namespace zerostate::client {

ChannelWatch::ChannelWatch(const std::vector<std::unique_ptr<ServerConn>>& servers,
                           absl::Duration period)
    : servers_(servers), period_(period) {
  thread_ = std::thread([this] { Run(); });
}

ChannelWatch::~ChannelWatch() {
  stop_.Notify();
  thread_.join();
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

void ChannelWatch::Poll() {
  const auto deadline = absl::ToChronoTime(absl::Now() + period_);
  int armed = 0;
  for (const auto& server : servers_) {
    for (const auto& channel : server->channels()) {
      channel->NotifyOnStateChange(channel->GetState(/*try_to_connect=*/false), deadline, &cq_,
                                   nullptr);
      ++armed;
    }
  }
  // Each ends at a change of its channel's state or at the deadline.
  void* tag = nullptr;
  bool ok = false;
  for (int i = 0; i < armed; ++i) (void)cq_.Next(&tag, &ok);
  if (armed == 0) stop_.WaitForNotificationWithTimeout(period_);
}

void ChannelWatch::Run() {
  std::vector<std::vector<bool>> ready(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    ready[s].assign(servers_[s]->channels().size(), false);
  }
  while (!stop_.HasBeenNotified()) {
    Poll();
    for (size_t s = 0; s < servers_.size(); ++s) Look(*servers_[s], ready[s]);
  }
}

void ChannelWatch::Look(ServerConn& server, std::vector<bool>& ready) {
  ConnCutter& cutter = *server.cutter();
  const bool cut = !cutter.Check().ok();
  bool any_ready = false;
  bool lost = false;
  const auto& channels = server.channels();
  for (size_t c = 0; c < channels.size(); ++c) {
    const grpc_connectivity_state state = channels[c]->GetState(/*try_to_connect=*/cut);
    const bool now = state == GRPC_CHANNEL_READY;
    lost = lost || (ready[c] && !now);
    any_ready = any_ready || now;
    ready[c] = now;
  }
  if (lost && !any_ready) {
    Timeline::Record("channel_cut", server.index());
    cutter.Cut(absl::StrCat("server ", server.address(),
                            " stopped answering on its gRPC channels (no keepalive answer, or "
                            "the connection closed)"));
  } else if (cut && any_ready) {
    cutter.Restore();
  }
}

}  // namespace zerostate::client
