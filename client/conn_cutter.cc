#include "client/conn_cutter.h"

#include <sys/socket.h>

#include "absl/time/clock.h"

namespace zerostate::client {

void ConnCutter::Cut(const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (cut_.empty()) cut_at_ = absl::Now();
  cut_ = why.empty() ? "cut" : why;
  // shutdown() wakes a thread blocked on the socket without closing it:
  // the descriptor stays its owner's until Untrack.
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);
}

void ConnCutter::Restore() {
  absl::MutexLock lock(&mu_);
  cut_.clear();
}

absl::Status ConnCutter::Check() const {
  absl::MutexLock lock(&mu_);
  return cut_.empty() ? absl::OkStatus() : absl::UnavailableError(cut_);
}

std::optional<absl::Time> ConnCutter::CutSince() const {
  absl::MutexLock lock(&mu_);
  if (cut_.empty()) return std::nullopt;
  return cut_at_;
}

void ConnCutter::Track(int fd) {
  absl::MutexLock lock(&mu_);
  fds_.insert(fd);
  if (!cut_.empty()) shutdown(fd, SHUT_RDWR);
}

void ConnCutter::Untrack(int fd) {
  absl::MutexLock lock(&mu_);
  fds_.erase(fd);
}

}  // namespace zerostate::client
