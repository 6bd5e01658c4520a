#include "server/replication/catch_up.h"

#include <sys/socket.h>

#include <algorithm>
#include <functional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/aligned_buffer.h"

namespace zerostate::server {

absl::StatusOr<std::shared_ptr<const ShardSnapshot>> SnapshotOf(Job& job) {
  auto snap = std::make_shared<ShardSnapshot>();
  snap->first.set_version(job.shard().Progress().min_version);
  AlignedBuffer<float> state(job.shard().tier_shape().block_floats());
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    if (auto s = job.gathers().ReadBlockAt(local, snap->first.version(), state.data()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("shard ", job.shard_index(), ": ", s.message()));
    }
    v1::ShardBlock& b = snap->blocks.emplace_back();
    b.set_block(job.blocks().begin + local);
    b.set_version(snap->first.version());
    b.set_state(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
    snap->bytes += b.state().size();
  }
  const uint64_t version = snap->first.version();
  snap->first.set_job_id(job.spec().job_id());
  snap->first.set_shard(job.shard_index());
  snap->first.set_applied_steps(job.step().applied_steps().Before(version));
  if (auto ts = job.step().trainer_states().Find(version)) snap->first.set_trainer_state(*ts);
  *snap->first.mutable_registration()->mutable_spec() = job.spec();
  for (const std::string& server : job.servers())
    snap->first.mutable_registration()->add_servers(server);
  return snap;
}

namespace {

// What a step held in a backlog costs.
uint64_t BytesOf(const StepReplicator::Payload& payload) {
  uint64_t bytes = payload.request.ByteSizeLong();
  for (const auto& [block, grad] : payload.grads) bytes += grad.size();
  return bytes;
}

}  // namespace

CatchUp::CatchUp(Replicator& owner, Copy copy, std::shared_ptr<const ShardSnapshot> snapshot)
    : owner_(owner),
      copy_(std::move(copy)),
      seed_bytes_(snapshot->bytes),
      bound_(owner.catchup_backlog_bytes()),
      next_step_(snapshot->first.version()) {
  std::random_device random;
  next_transfer_ = (uint64_t{random()} << 32 | random()) | 1;
  thread_ =
      std::thread([this, snapshot = std::move(snapshot)]() mutable { Run(std::move(snapshot)); });
}

CatchUp::~CatchUp() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    ClearLocked();
    for (int fd : lane_fds_) shutdown(fd, SHUT_RDWR);
  }
  cancel_.Cancel();
  thread_.join();
}

CatchUp::Outcome CatchUp::Offer(std::shared_ptr<const Payload> payload) {
  const uint64_t step = payload->request.step();
  const uint64_t bytes = BytesOf(*payload);
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return Outcome::kDropped;
  if (step < next_step_) return Outcome::kKept;  // resent: kept or acknowledged already
  if (step > next_step_) {
    FailLocked(absl::FailedPreconditionError(
        absl::StrCat("catch-up of shard ", copy_.shard, "'s copy on ", copy_.address, ": step ",
                     step, " came while it waited for step ", next_step_)));
    return Outcome::kDropped;
  }
  // This step goes to the copy as a live copy's, after Drain, when the
  // only step left is in flight (Run sends the first at once), or when the
  // copy did not gain on the primary since the last step (it applies steps
  // no faster than they are decided, and would chase the primary for ever):
  // then the Step waits for the backlog instead.
  const bool gaining = backlog_.size() + 1 < left_after_offer_;
  if (seeded_ && (backlog_.size() <= 1 || (seeded_at_offer_ && !gaining))) {
    return Outcome::kCaughtUp;
  }
  if (bytes_ + bytes > bound_) {
    FailLocked(absl::ResourceExhaustedError(
        absl::StrCat("catch-up of shard ", copy_.shard, "'s copy on ", copy_.address, ": step ",
                     step, " would take its backlog of ", backlog_.size(), " steps (", bytes_,
                     " bytes) past ", "--catchup_backlog_bytes=", bound_)));
    return Outcome::kDropped;
  }
  backlog_.push_back(std::move(payload));
  bytes_ += bytes;
  ++next_step_;
  left_after_offer_ = backlog_.size();
  seeded_at_offer_ = seeded_;
  owner_.AddBacklogBytes(static_cast<int64_t>(bytes));
  return Outcome::kKept;
}

absl::Status CatchUp::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status CatchUp::Drain() {
  absl::MutexLock lock(&mu_);
  std::function<bool()> drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !failure_.ok() || backlog_.empty();
  };
  mu_.Await(absl::Condition(&drained));
  return failure_;
}

void CatchUp::Run(std::shared_ptr<const ShardSnapshot> snapshot) {
  v1::SeedPart first = snapshot->first;
  first.mutable_registration()->set_shard_index(copy_.server);
  absl::Status s =
      owner_.Seed(copy_.address, copy_.token, std::move(first), snapshot->blocks, &cancel_);
  snapshot.reset();  // the state's copy goes as soon as it crossed
  {
    absl::MutexLock lock(&mu_);
    if (!s.ok()) {
      FailLocked(
          absl::Status(s.code(), absl::StrCat("catch-up of shard ", copy_.shard, "'s copy on ",
                                              copy_.address, ": seed: ", s.message())));
      return;
    }
    seeded_ = true;
  }
  std::shared_ptr<const Payload> next;
  while (Next(&next)) {
    s = SendStep(*next);
    absl::MutexLock lock(&mu_);
    if (stop_ || !failure_.ok()) return;  // dropped meanwhile: the backlog is gone
    if (!s.ok()) {
      FailLocked(absl::Status(
          s.code(), absl::StrCat("catch-up of shard ", copy_.shard, "'s copy on ", copy_.address,
                                 ": step ", next->request.step(), ": ", s.message())));
      return;
    }
    const uint64_t bytes = BytesOf(*backlog_.front());
    backlog_.pop_front();
    bytes_ -= bytes;
    owner_.AddBacklogBytes(-static_cast<int64_t>(bytes));
  }
}

absl::Status CatchUp::SendStep(const Payload& step) {
  std::vector<std::unique_ptr<client::DataConn>> lanes;
  for (int i = 0; i < std::max(1, owner_.lanes()); ++i) {
    auto lane = owner_.Lane(copy_.address);
    if (!lane.ok()) break;
    lanes.push_back(*std::move(lane));
  }
  std::vector<absl::Status> sent(lanes.size());
  const uint64_t transfer = next_transfer_++;
  if (!lanes.empty()) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return absl::CancelledError("catch-up dropped");
      for (const auto& lane : lanes) lane_fds_.push_back(lane->fd());
    }
    std::vector<std::thread> threads;
    for (size_t l = 0; l < lanes.size(); ++l) {
      threads.emplace_back(
          [&, l] { sent[l] = SendSums(*lanes[l], step, transfer, l, lanes.size()); });
    }
    for (std::thread& t : threads) t.join();
    absl::MutexLock lock(&mu_);
    lane_fds_.clear();
    if (stop_) return absl::CancelledError("catch-up dropped");  // its lanes may be shut down
  }
  bool whole = lanes.empty();
  for (size_t l = 0; l < lanes.size(); ++l) {
    if (sent[l].ok()) {
      owner_.Release(copy_.address, std::move(lanes[l]));
    } else {
      whole = true;  // a broken lane is not given back
    }
  }
  return owner_.Send(copy_.address, copy_.token, copy_.shard, copy_.job_id, step,
                     whole ? 0 : transfer, &cancel_);
}

absl::Status CatchUp::SendSums(client::DataConn& lane, const Payload& step, uint64_t transfer,
                               size_t first, size_t stride) const {
  v1::ReplicaSum sum;
  sum.set_job_id(copy_.job_id);
  sum.set_shard(copy_.shard);
  sum.set_transfer(transfer);
  owner_.StampTerm(copy_.job_id, copy_.shard, sum.mutable_term());
  for (size_t i = first; i < step.grads.size(); i += stride) {
    sum.set_block(step.grads[i].first);
    if (auto s = owner_.SendSum(lane, copy_.token, sum, step.grads[i].second); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool CatchUp::Next(std::shared_ptr<const Payload>* next) {
  absl::MutexLock lock(&mu_);
  std::function<bool()> ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !failure_.ok() || !backlog_.empty();
  };
  mu_.Await(absl::Condition(&ready));
  if (stop_ || !failure_.ok()) return false;
  *next = backlog_.front();
  return true;
}

void CatchUp::FailLocked(absl::Status why) {
  if (failure_.ok()) failure_ = std::move(why);
  ClearLocked();
}

void CatchUp::ClearLocked() {
  backlog_.clear();
  owner_.AddBacklogBytes(-static_cast<int64_t>(bytes_));
  bytes_ = 0;
}

}  // namespace zerostate::server
