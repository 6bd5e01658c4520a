// A fault-injecting TCP proxy for tests: listens on 127.0.0.1 (ephemeral
// port) and forwards every connection to a target "host:port", over real
// sockets. On command it
//   - cuts every open connection (RST, or an orderly close),
//   - cuts every open connection after N more bytes in one direction,
//   - delays everything it forwards by D,
//   - black-holes: accepts connections but forwards nothing (and does not
//     connect them to the target) until released; what was held then flows.
// Connections opened after a cut are forwarded normally: a client that
// reconnects gets through, as after a real network blip.
//
// One thread accepts; one thread per connection moves bytes both ways with
// non-blocking sockets and poll(). The destructor closes every socket and
// joins every thread.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zerostate::testing {

class FaultProxy {
 public:
  enum class Direction { kToTarget = 0, kToClient = 1 };
  enum class CutMode { kReset, kClose };

  // Listens on 127.0.0.1:0 and forwards to `target` ("host:port", numeric
  // IPv4 host or "localhost"). Errors: INVALID_ARGUMENT naming the target,
  // INTERNAL naming the failed system call.
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& target);

  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // "127.0.0.1:PORT", the address clients dial instead of the target.
  const std::string& address() const { return address_; }

  // Cuts every connection open now.
  void CutAll(CutMode mode = CutMode::kReset);
  // Forwards `bytes` more bytes in `dir` (over all connections); the first
  // byte beyond them is dropped and every connection open at that moment is
  // cut (RST). Then disarms.
  void CutAfter(Direction dir, uint64_t bytes);
  // Holds every byte for `delay` before forwarding it (0: no delay).
  void SetDelay(absl::Duration delay);
  // On: accepts but forwards nothing; off: releases what was held.
  void SetBlackHole(bool on);

  // Connections accepted so far, and cuts made (one per connection cut).
  int accepted() const { return accepted_.load(); }
  int cuts() const { return cuts_.load(); }
  // Bytes forwarded so far in `dir`.
  uint64_t forwarded(Direction dir) const { return forwarded_[static_cast<int>(dir)].load(); }

 private:
  struct Conn;
  FaultProxy(int listen_fd, std::string address, std::string target_host, int target_port);
  void AcceptLoop();
  void Serve(std::shared_ptr<Conn> conn);
  // Bytes of `want` that direction `dir` may forward now; arms a cut when
  // a CutAfter budget runs out.
  size_t Allow(int dir, size_t want);

  const int listen_fd_;
  const std::string address_;
  const std::string target_host_;
  const int target_port_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> delay_us_{0};
  std::atomic<bool> black_hole_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> cuts_{0};
  std::atomic<uint64_t> forwarded_[2] = {0, 0};

  absl::Mutex mu_;
  int64_t budget_[2] ABSL_GUARDED_BY(mu_) = {-1, -1};  // -1: no CutAfter armed
  uint64_t cut_generation_ ABSL_GUARDED_BY(mu_) = 0;   // bumped by every cut order
  CutMode cut_mode_ ABSL_GUARDED_BY(mu_) = CutMode::kReset;
  std::vector<std::thread> conn_threads_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace zerostate::testing
