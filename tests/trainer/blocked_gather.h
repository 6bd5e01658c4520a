// A gather the servers never answer (the version it waits for never
// comes), as the client runs one: a thread blocked reading a real socket
// whose peer never writes, registered with its ticket's cancel as a
// data-plane attempt registers its connection (client/transfer.cc).
// Cancelling the ticket shuts the socket down: the read ends and the
// ticket completes with the cancel's CANCELLED status. Nothing else ends
// it before the test's end (the destructor closes the peer).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "client/ticket_state.h"
#include "trainer/engine/gather_slot.h"

namespace zerostate::trainer {

class BlockedGather {
 public:
  BlockedGather() {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds_) != 0) fds_[0] = fds_[1] = -1;
    reader_ = std::thread([this] {
      client::CallCancel::Registration interrupt =
          state_->cancel().OnCancel([fd = fds_[0]] { shutdown(fd, SHUT_RDWR); });
      char c;
      (void)!read(fds_[0], &c, 1);
      interrupt.Reset();
      state_->Done(state_->cancel().Explain(absl::UnavailableError("the peer closed")));
    });
  }
  ~BlockedGather() {
    shutdown(fds_[1], SHUT_RDWR);  // the test's end: the read ends if nothing cancelled it
    reader_.join();
    close(fds_[0]);
    close(fds_[1]);
  }
  BlockedGather(const BlockedGather&) = delete;
  BlockedGather& operator=(const BlockedGather&) = delete;

  client::Ticket ticket() const { return client::Ticket(state_); }
  GatherSlot::IssueFn issue() const {
    return [s = state_] { return client::Ticket(s); };
  }

 private:
  std::shared_ptr<client::Ticket::State> state_ = std::make_shared<client::Ticket::State>(1);
  int fds_[2] = {-1, -1};
  std::thread reader_;  // last: starts once the socket is there
};

}  // namespace zerostate::trainer
