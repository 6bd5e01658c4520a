// Names a worker that is gone instead of hanging on it.
//
// A rank waiting on a dead peer in another node never gets an error: its
// gathers wait for a version the servers cannot reach, the coordinator's
// GradStats for gradients that never come. So every rank runs a PeerWatch:
// once the rank has been inside one step for a third of `timeout`, the
// watch holds a roll call through the rendezvous of the state service,
// star-shaped so that each missing rank is known without parsing a
// server's message:
//   - the coordinator (rank 0) meets every other rank q on its own key
//     "alive/<epoch>/<n>/<q>" (world 2; n counts roll calls, the same on
//     every rank), all at once, waiting up to two thirds of `timeout` (two
//     calls of a third each, so a rank that comes a little late still
//     meets it); the ranks that do not come are gone, named `timeout`
//     after their step stalled;
//   - then it tells every rank that came who is gone ("verdict/..." keys);
//   - a rank whose coordinator does not come (or sends no verdict) reports
//     rank 0 gone.
// If someone is gone, on_gone gets a message naming each gone rank as
// "rank R (node N, local rank L)"; zerostate-worker prints it and exits
// non-zero. If everyone came (a slow step, not a dead peer), the watch
// calls again after another third of `timeout` of the same step. Keep
// `timeout` above the slowest step. A state server that is away (its
// calls UNAVAILABLE) is waited for as every call does
// (ClientOptions::unavailable_wait), not taken for a gone rank.
//
// Thread safety: Enter/Leave from the rank's thread; the roll call runs on
// the watch's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "worker/engine.h"

namespace zerostate::worker {

using PeerGoneFn = std::function<void(const std::string& message)>;

// "rank R (node N, local rank L)" for global rank `rank` of `topo`'s job.
std::string RankName(const Topology& topo, uint32_t rank);

class PeerWatch {
 public:
  // `control`: a client of its own whose rpc_timeout is `timeout` (not
  // owned; see MakeControlClient). on_gone is called from the watch's
  // thread, at most once.
  PeerWatch(client::Client* control, std::string scope, const Topology& topo,
            absl::Duration timeout, PeerGoneFn on_gone);
  ~PeerWatch();  // stops the thread (an ongoing roll call ends first)

  void Enter(uint64_t step, uint32_t epoch);
  void Leave();

 private:
  void Run();
  // Returns the message naming the gone ranks, "" if all came.
  std::string RollCall(uint64_t step, uint32_t epoch);

  client::Client* const control_;
  const std::string scope_;
  const Topology topo_;
  const absl::Duration timeout_;
  const PeerGoneFn on_gone_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool in_step_ ABSL_GUARDED_BY(mu_) = false;
  bool called_ ABSL_GUARDED_BY(mu_) = false;  // a roll call ran in this step
  uint64_t calls_ = 0;  // roll calls so far (the watch thread's); the same on every rank
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time entered_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A client to the same servers as `options` for the roll call: each call
// waits at most a third of `timeout`, and is made at most twice.
[[nodiscard]] absl::StatusOr<std::unique_ptr<client::Client>> MakeControlClient(
    client::ClientOptions options, absl::Duration timeout);

}  // namespace zerostate::worker
