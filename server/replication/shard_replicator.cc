#include "server/replication/shard_replicator.h"

#include <sys/socket.h>

#include <algorithm>
#include <random>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc_status.h"
#include "common/timeline.h"
#include "server/replication/catch_up.h"

namespace zerostate::server {
// One lane of a streamed step to one copy: a connection to its data plane.
struct ShardReplicator::Stream {
  uint32_t server = 0;
  std::string address;
  std::unique_ptr<client::DataConn> conn;  // null: could not be had
  absl::Status status;  // the first failure on this lane (then no more sums on it)
  bool owed = false;    // the last frame's answer is still to read
};
ShardReplicator::ShardReplicator(Replicator& owner, Job& job,
                                 std::vector<std::pair<uint32_t, std::string>> copies,
                                 std::string token)
    : owner_(owner),
      job_(job),
      job_id_(job.spec().job_id()),
      shard_(job.shard_index()),
      blocks_(job.blocks().size()),
      copies_(std::move(copies)),
      token_(std::move(token)) {
  std::random_device random;
  next_transfer_ = (uint64_t{random()} << 32 | random()) | 1;
  {
    absl::MutexLock lock(&mu_);
    ResetLocked();
  }
  if (owner_.lanes() > 1) lane_pool_ = std::make_unique<ThreadPool>(owner_.lanes() - 1, 0, "zs-lanes");
  streamer_ = std::thread([this] { StreamLoop(); });
  prober_ = std::thread([this] { ProbeLoop(); });
}

void ShardReplicator::OnLanes(size_t n, const std::function<void(size_t)>& fn) {
  if (lane_pool_ != nullptr) {
    lane_pool_->ParallelFor(n, fn);
    return;
  }
  for (size_t i = 0; i < n; ++i) fn(i);
}

ShardReplicator::~ShardReplicator() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    CancelLocked();
  }
  {
    absl::MutexLock lock(&probe_mu_);
    probe_stop_ = true;
  }
  streamer_.join();
  prober_.join();
}

void ShardReplicator::Probe(uint32_t server, const std::string& address) {
  absl::MutexLock lock(&probe_mu_);
  if (probing_.insert(server).second) to_probe_.emplace_back(server, address);
}

void ShardReplicator::ProbeLoop() {
  absl::MutexLock lock(&probe_mu_);
  while (true) {
    std::function<bool()> work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(probe_mu_) {
      return probe_stop_ || !to_probe_.empty();
    };
    probe_mu_.Await(absl::Condition(&work));
    if (probe_stop_) return;
    const auto [server, address] = to_probe_.front();
    to_probe_.erase(to_probe_.begin());
    probe_mu_.Unlock();
    // Up to Options::reconnect_timeout: never on a step's path.
    if (owner_.Reconnect(address)) StartCatchUp(server, address);
    probe_mu_.Lock();
    probing_.erase(server);
  }
}

void ShardReplicator::ResetLocked() {
  armed_ = UINT64_MAX;
  queue_.clear();
  taken_.assign(blocks_, false);
  sent_.assign(blocks_, false);
  in_flight_ = 0;
  remaining_.clear();
  next_remaining_ = 0;
  streaming_ = false;
  deciding_ = false;
  streamed_to_.clear();
  decided_.reset();
  whole_ = false;
  pinned_.clear();
  abandon_ = false;
  stream_done_ = false;
  stream_results_.clear();
}

void ShardReplicator::OnBlockComplete(const Block& b) {
  absl::MutexLock lock(&mu_);
  if (b.version == armed_ && !deciding_ && !taken_[b.local]) queue_.push_back(b.local);
}

void ShardReplicator::Arm(uint64_t step) {
  {
    absl::MutexLock lock(&mu_);
    if (streaming_ || armed_ == step) return;
    armed_ = step;
  }
  // Blocks completed before: their OnBlockComplete came too early.
  std::vector<uint64_t> complete;
  for (const auto& bp : job_.shard().all_blocks()) {
    absl::MutexLock lock(&bp->mu);
    if (bp->version == step && bp->acc.complete()) complete.push_back(bp->local);
  }
  absl::MutexLock lock(&mu_);
  if (armed_ != step || deciding_) return;
  for (uint64_t local : complete) {
    if (!taken_[local]) queue_.push_back(local);
  }
}

std::string_view ShardReplicator::SumOf(const Block& b, std::string* scratch) {
  std::string_view bytes = b.PinnedSum();
  if (b.acc.sum() == nullptr) {  // single-gradient mode: widened into `scratch`
    b.acc.CopySum(scratch);
    bytes = *scratch;
  }
  return bytes;
}

std::optional<std::string_view> ShardReplicator::PinFor(uint64_t local, uint64_t step,
                                                         std::string* scratch) const {
  Block& b = *job_.shard().all_blocks()[local];
  absl::MutexLock lock(&b.mu);
  if (b.version != step || !b.PinSum().ok()) return std::nullopt;
  return SumOf(b, scratch);
}

std::string_view ShardReplicator::Pinned(uint64_t local, std::string* scratch) const {
  Block& b = *job_.shard().all_blocks()[local];
  absl::MutexLock lock(&b.mu);
  return SumOf(b, scratch);
}

void ShardReplicator::Unpin(uint64_t local) const {
  Block& b = *job_.shard().all_blocks()[local];
  absl::MutexLock lock(&b.mu);
  (void)b.UnpinSum();  // pinned by this object: never refused
}

void ShardReplicator::FillWhole(Payload& payload) {
  {
    absl::MutexLock lock(&mu_);
    if (whole_) return;
    whole_ = true;
  }
  // The blocks of the step are pinned (Decide), so their sums are the
  // step's; a block not at the step is skipped by the backup, whatever
  // it gets.
  OnLanes(std::max(1, owner_.lanes()), [&](size_t lane) {
    for (size_t local = lane; local < blocks_; local += std::max(1, owner_.lanes())) {
      Block& b = *job_.shard().all_blocks()[local];
      absl::MutexLock lock(&b.mu);
      b.acc.CopySum(&payload.grads[local].second);
    }
  });
}

void ShardReplicator::StreamLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    std::function<bool()> work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || (!streaming_ && armed_ != UINT64_MAX && !deciding_ && !queue_.empty());
    };
    mu_.Await(absl::Condition(&work));
    if (stop_) return;
    StreamStep(armed_);
  }
}

void ShardReplicator::CancelLocked() {
  for (int fd : lane_fds_) shutdown(fd, SHUT_RDWR);
}

void ShardReplicator::StreamStep(uint64_t step) {
  streaming_ = true;
  const int lanes = std::max(1, owner_.lanes());
  std::vector<std::pair<uint32_t, std::string>> to;
  for (const auto& [server, address] : copies_) {
    if (owner_.IsLost({job_id_, shard_, server})) continue;  // caught up at Decide
    to.emplace_back(server, address);
    streamed_to_.push_back(server);
  }
  const uint64_t transfer = next_transfer_++;
  mu_.Unlock();
  // Each copy's lanes; one that cannot be had (the copy's data port is
  // not known yet, or it cannot be reached) fails at once, and the copy
  // gets the step whole on ApplyStep.
  std::vector<std::vector<std::unique_ptr<Stream>>> by_lane(lanes);  // [lane][copy]
  for (const auto& [server, address] : to) {
    for (int lane = 0; lane < lanes; ++lane) {
      auto st = std::make_unique<Stream>();
      st->server = server;
      st->address = address;
      auto conn = owner_.Lane(address);
      if (conn.ok()) {
        st->conn = *std::move(conn);
      } else {
        st->status = conn.status();
      }
      by_lane[lane].push_back(std::move(st));
    }
  }
  mu_.Lock();
  for (auto& calls : by_lane) {
    for (auto& st : calls) {
      if (st->conn != nullptr) lane_fds_.push_back(st->conn->fd());
    }
  }
  if (stop_) CancelLocked();
  mu_.Unlock();
  // Each lane sends blocks as they complete, then, once decided, its share
  // of the rest; the step goes on ApplyStep once every lane is answered.
  OnLanes(lanes, [&](size_t lane) { SendLane(step, transfer, by_lane[lane]); });
  Timeline::Record("repl_lanes_done", static_cast<int64_t>(step));
  mu_.Lock();
  lane_fds_.clear();
  const bool give_up = stop_ || abandon_;
  const std::shared_ptr<Payload> payload = decided_;
  mu_.Unlock();
  std::vector<Result> results;
  bool failed = false;  // a lane of some copy
  for (auto& calls : by_lane) {
    for (auto& st : calls) failed = failed || !st->status.ok();
  }
  if (failed && !give_up) FillWhole(*payload);  // the sums are still pinned
  // Every copy's ApplyStep at once, on the lanes: with two backups or more
  // the Step waits for one round trip, not one per copy.
  if (!give_up) results.resize(by_lane[0].size());
  OnLanes(results.size(), [&](size_t c) {
    const Stream& main = *by_lane[0][c];
    bool whole = true;
    for (int lane = 0; lane < lanes; ++lane) whole = whole && by_lane[lane][c]->status.ok();
    // A lane that failed: the step goes whole on ApplyStep.
    absl::Status status =
        owner_.Send(main.address, token_, shard_, job_id_, *payload, whole ? transfer : 0);
    results[c] = Result{main.server, main.address, false, std::move(status), 0, nullptr};
  });
  Timeline::Record("repl_applied", static_cast<int64_t>(step));
  for (auto& calls : by_lane) {
    for (auto& st : calls) {
      if (st->conn != nullptr && st->status.ok() && !give_up) {
        owner_.Release(st->address, std::move(st->conn));
      }
    }
  }
  mu_.Lock();
  stream_results_ = std::move(results);
  stream_done_ = true;
}

void ShardReplicator::SendLane(uint64_t step, uint64_t transfer,
                               std::vector<std::unique_ptr<Stream>>& calls) {
  v1::ReplicaSum sum;
  sum.set_job_id(job_id_);
  sum.set_shard(shard_);
  sum.set_transfer(transfer);
  owner_.StampTerm(job_id_, shard_, sum.mutable_term());
  // The answer to a frame is read once the next frame went (or the lane
  // ends): no round trip between two sums. Every copy's frame goes before
  // any answer is read, so the copies receive at once.
  auto answers = [&] {
    for (auto& st : calls) {
      if (st->status.ok() && st->owed) st->status = owner_.RecvSumAck(*st->conn);
      st->owed = false;
    }
  };
  auto send = [&](uint64_t block, std::string_view bytes) {
    sum.set_block(block);
    for (auto& st : calls) {
      if (st->status.ok()) st->status = owner_.SendSumFrame(*st->conn, token_, sum, bytes);
    }
    answers();
    for (auto& st : calls) st->owed = st->status.ok();
  };
  std::string scratch;  // a sum widened from single-gradient mode
  absl::MutexLock lock(&mu_);
  // Before the step is decided: each block's sum as its push completes it,
  // pinned in its accumulator while it travels.
  std::function<bool()> next = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || abandon_ || deciding_ || !queue_.empty();
  };
  while (true) {
    mu_.Await(absl::Condition(&next));
    if (stop_ || abandon_ || deciding_) break;
    const uint64_t local = queue_.front();
    queue_.erase(queue_.begin());
    if (taken_[local]) continue;
    taken_[local] = true;
    ++in_flight_;
    mu_.Unlock();
    const std::optional<std::string_view> bytes = PinFor(local, step, &scratch);
    mu_.Lock();
    --in_flight_;
    if (!bytes.has_value()) {
      taken_[local] = false;  // not complete (yet): its completion queues it again
      continue;
    }
    sent_[local] = true;
    // Sent off the lock, so that Decide does not wait for the network.
    mu_.Unlock();
    send(job_.blocks().begin + local, *bytes);
    Timeline::Record("repl_sum_ahead", static_cast<int64_t>(job_.blocks().begin + local),
                     static_cast<int64_t>(step));
    Unpin(local);
    mu_.Lock();
  }
  // Decided: a share of the blocks not sent yet, straight from their
  // accumulators (Decide pinned them) while the pass reads them too, or
  // from the payload where Decide copied them.
  std::function<bool()> decided = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || abandon_ || decided_ != nullptr;
  };
  mu_.Await(absl::Condition(&decided));
  const std::shared_ptr<const Payload> payload = decided_;
  while (!stop_ && !abandon_ && next_remaining_ < remaining_.size()) {
    const uint64_t local = remaining_[next_remaining_++];
    const bool copied = whole_;
    mu_.Unlock();
    send(job_.blocks().begin + local,
         copied ? std::string_view(payload->grads[local].second) : Pinned(local, &scratch));
    Timeline::Record("repl_sum_after", static_cast<int64_t>(job_.blocks().begin + local),
                     static_cast<int64_t>(step));
    mu_.Lock();
  }
  mu_.Unlock();
  answers();  // the last frames'
  mu_.Lock();
}

std::function<std::vector<ShardReplicator::Result>()> ShardReplicator::SendWhole(
    std::shared_ptr<const Payload> payload, const std::vector<uint32_t>& to) {
  struct Call {
    Result result;
    std::thread thread;
  };
  auto calls = std::make_shared<std::vector<Call>>();
  auto done = std::make_shared<std::vector<Result>>();  // results with nothing to send
  std::vector<Result> sends;
  for (const auto& [server, address] : copies_) {
    if (std::find(to.begin(), to.end(), server) == to.end()) continue;
    if (owner_.IsLost({job_id_, shard_, server})) {
      CatchUpStep(server, address, payload, &sends, done.get());
    } else {
      sends.push_back(Result{server, address, false, absl::OkStatus(), 0, nullptr});
    }
  }
  for (Result& r : sends) calls->push_back(Call{std::move(r), {}});
  for (Call& c : *calls) {
    c.thread = std::thread([this, &r = c.result, payload] {
      if (r.rejoin != nullptr) {  // after its catch-up's last step
        r.status = r.rejoin->Drain();
        r.rejoin.reset();
        if (!r.status.ok()) return;
      }
      r.status = owner_.Send(r.address, token_, shard_, job_id_, *payload);
    });
  }
  return [calls, done]() {
    std::vector<Result> results = std::move(*done);
    for (Call& c : *calls) {
      c.thread.join();
      results.push_back(std::move(c.result));
    }
    return results;
  };
}

void ShardReplicator::CatchUpStep(uint32_t server, const std::string& address,
                                  const std::shared_ptr<const Payload>& payload,
                                  std::vector<Result>* sends, std::vector<Result>* done) {
  std::shared_ptr<CatchUp> ended;  // destroyed (its thread joined) off the lock
  {
    absl::MutexLock lock(&catch_up_mu_);
    auto it = catch_ups_.find(server);
    if (it != catch_ups_.end()) {
      CatchUp& c = *it->second;
      switch (c.Offer(payload)) {
        case CatchUp::Outcome::kKept:
          return;
        case CatchUp::Outcome::kCaughtUp:  // revived once it acknowledges this step
          sends->push_back(
              Result{server, address, true, absl::OkStatus(), c.seed_bytes(), it->second});
          break;
        case CatchUp::Outcome::kDropped:  // still lost; a later step starts another
          if (absl::Status why = c.failure(); absl::IsAborted(why)) {
            done->push_back(Result{server, address, true, std::move(why), 0, nullptr});  // fencing
          }
          break;
      }
      ended = std::move(it->second);
      catch_ups_.erase(it);
    }
  }
  if (ended == nullptr) Probe(server, address);  // it starts the catch-up once the copy answers
}

void ShardReplicator::StartCatchUp(uint32_t server, const std::string& address) {
  // Between two passes: every block at the shard's version, which the
  // next step decided starts from (its Offer is the catch-up's first).
  absl::MutexLock pass_lock(&job_.step().pass_mu());
  if (job_.step().deposed() || !owner_.IsLost({job_id_, shard_, server})) return;
  {
    absl::MutexLock lock(&catch_up_mu_);
    if (catch_ups_.contains(server)) return;
  }
  auto snapshot = SnapshotOf(job_);
  if (!snapshot.ok()) return;
  auto started = std::make_shared<CatchUp>(
      owner_, CatchUp::Copy{job_id_, shard_, server, address, token_}, *std::move(snapshot));
  absl::MutexLock lock(&catch_up_mu_);
  catch_ups_[server] = std::move(started);
}

void ShardReplicator::DropCatchUps() {
  absl::flat_hash_map<uint32_t, std::shared_ptr<CatchUp>> dropped;
  {
    absl::MutexLock lock(&catch_up_mu_);
    dropped.swap(catch_ups_);
  }
}

absl::Status ShardReplicator::Judge(uint64_t step, const std::vector<Result>& results) {
  // Fencing comes first: a copy that serves the shard as primary now, or
  // accepted a newer primary's term (ABORTED, to the step or to its
  // catch-up), means this server is not the primary any more, whatever the
  // others answered. Every such copy is named.
  std::vector<std::string> refusals;
  for (const Result& r : results) {
    if (!absl::IsAborted(r.status)) continue;
    refusals.push_back(absl::StrCat(r.address, " (", r.status.message(), ")"));
  }
  if (!refusals.empty()) {
    std::string why = absl::StrCat(
        "not primary: shard ", shard_, " of job '", job_id_, "' has a newer primary: step ", step,
        " from this server was refused by ", absl::StrJoin(refusals, " and by "), "; step ", step,
        " is not acknowledged and this server is fenced for the shard; ask the shard's backups");
    // Deposed before fenced: a Serve in between must not claim the shard again.
    job_.step().MarkDeposed(why);
    owner_.Depose(job_id_, shard_);
    return absl::UnavailableError(std::move(why));
  }
  absl::Status first;
  for (const Result& r : results) {
    const absl::Status& s = r.status;
    if (r.catch_up) {  // a failed catch-up leaves the copy lost, the Step unharmed
      if (s.ok()) owner_.Revive({job_id_, shard_, r.server}, r.address, r.seed_bytes);
      continue;
    }
    if (s.ok()) continue;
    // UNAUTHENTICATED: the copy's server knows no job of this token (it
    // restarted empty; the job's calls answer so, never NOT_FOUND).
    // FAILED_PRECONDITION: the copy needs a catch-up.
    if (absl::IsUnavailable(s) || absl::IsNotFound(s) || absl::IsFailedPrecondition(s) ||
        absl::IsDeadlineExceeded(s) || absl::IsUnauthenticated(s)) {
      owner_.MarkLost({job_id_, shard_, r.server}, blocks_);
      continue;
    }
    if (first.ok()) {
      first = absl::UnavailableError(absl::StrCat("step ", step, " of shard ", shard_,
                                                  ": backup ", r.address,
                                                  " did not acknowledge it: ", s.message()));
    }
  }
  // No step is acknowledged without a lost copy before the membership
  // records it behind (at failover a copy in sync then claims first).
  for (const auto& [server, address] : copies_) {
    if (!owner_.IsLost({job_id_, shard_, server})) continue;
    absl::Status recorded = owner_.RecordBehind({job_id_, shard_, server}, address);
    if (!recorded.ok() && first.ok()) {
      first = absl::UnavailableError(
          absl::StrCat("step ", step, " of shard ", shard_, ": backup ", address,
                       " is lost and the membership could not record it behind (",
                       recorded.message(), "); the step is not acknowledged"));
    }
  }
  return first;
}

std::function<absl::Status()> ShardReplicator::Decide(const v1::StepRequest& req,
                                                      std::shared_ptr<const Payload>* sent) {
  const uint64_t step = req.step();
  Timeline::Record("repl_decide", static_cast<int64_t>(step));
  const Range range = job_.blocks();
  std::vector<bool> ahead(blocks_, false);  // sent by a lane already
  std::vector<uint32_t> whole;            // the copies that get the step whole
  bool streamed = false;
  {
    absl::MutexLock lock(&mu_);
    if (streaming_ && armed_ != step) {  // a stream of another step (a restore came between)
      abandon_ = true;
      CancelLocked();
      mu_.Await(absl::Condition(&stream_done_));
    }
    streamed = streaming_ && !abandon_;
    if (!streamed) ResetLocked();  // nothing armed until this step is acknowledged
    deciding_ = true;              // the stream takes no more blocks
    mu_.Await(absl::Condition(
        +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
    if (streamed) ahead = sent_;
    for (const auto& [server, address] : copies_) {
      if (!streamed || std::find(streamed_to_.begin(), streamed_to_.end(), server) ==
                           streamed_to_.end()) {
        whole.push_back(server);
      }
    }
  }
  auto payload = std::make_shared<Payload>();
  payload->request = req;
  payload->grads.resize(blocks_);
  for (uint64_t local = 0; local < blocks_; ++local) {
    payload->grads[local].first = range.begin + local;
  }
  // Where every copy streams, nothing is copied: each block's sum stays
  // pinned in its accumulator until the backups hold the step (the pass
  // reads it meanwhile; the next version's pushes wait), and the lanes
  // send the rest from there.
  bool copy = !streamed || !whole.empty();
  std::vector<uint64_t> pinned;
  for (uint64_t local = 0; local < blocks_ && !copy; ++local) {
    Block& b = *job_.shard().all_blocks()[local];
    absl::MutexLock lock(&b.mu);
    if (b.version == step && b.PinSum().ok()) {
      pinned.push_back(local);
    } else {
      copy = true;  // a block stepped already (a retry after a failed pass)
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t local = 0; local < blocks_; ++local) {
      if (!ahead[local]) remaining_.push_back(local);
    }
    pinned_ = std::move(pinned);
  }
  // Else (nothing was armed, a copy gets the step whole, a retry) every
  // sum is copied into the payload first, by a thread per lane, the pass
  // waiting. As a backup needs it: a block not at `step` (stepped
  // already) is skipped there, whatever it gets.
  if (copy) FillWhole(*payload);
  {
    absl::MutexLock lock(&mu_);
    if (streamed) decided_ = payload;
  }
  *sent = payload;
  auto others = SendWhole(payload, whole);
  return [this, others, streamed, step, payload]() {
    std::vector<Result> results = others();
    if (streamed) {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&stream_done_));
      for (Result& r : stream_results_) results.push_back(std::move(r));
    }
    absl::Status s = Judge(step, results);
    if (!s.ok()) FillWhole(*payload);  // a retry sends it whole (Resend)
    std::vector<uint64_t> pinned;
    {
      absl::MutexLock lock(&mu_);
      pinned.swap(pinned_);
      ResetLocked();
    }
    for (uint64_t local : pinned) Unpin(local);
    Rearm(step);
    return s;
  };
}

void ShardReplicator::Rearm(uint64_t step) {
  if (job_.step().deposed()) {
    DropCatchUps();  // a deposed copy sends no more steps
  } else {
    Arm(step + 1);
  }
}

absl::Status ShardReplicator::Conclude(uint64_t step, const std::vector<Result>& results) {
  absl::Status s = Judge(step, results);
  Rearm(step);
  return s;
}

std::function<absl::Status()> ShardReplicator::Resend(std::shared_ptr<const Payload> payload) {
  std::vector<uint32_t> all;
  for (const auto& [server, address] : copies_) all.push_back(server);
  const uint64_t step = payload->request.step();
  auto others = SendWhole(std::move(payload), all);
  return [this, others, step]() {
    return Conclude(step, others());
  };
}

}  // namespace zerostate::server
