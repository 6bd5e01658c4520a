// NvmeTier::Update: the read / compute / write pipeline.
#include <chrono>
#include <cstring>
#include <deque>

#include "server/core/tier/nvme_tier.h"

namespace zerostate::server {

// One Update's trip of `blocks` through the tier's bounce buffers. Each
// buffer (a stage) carries one block at a time: kReading -> kReady ->
// (compute on this thread) -> kWriting -> kFree. Blocks are computed in
// order; reads of later blocks and writes of earlier ones are in flight
// meanwhile, up to the queue's depth.
class NvmeTier::UpdateRun {
 public:
  using Compute = std::function<bool(uint64_t b, float* state)>;
  using Commit = std::function<void(uint64_t b)>;

  UpdateRun(NvmeTier& tier, io::IoQueue& queue, const std::vector<uint64_t>& blocks,
            const Compute& compute, const Commit& commit)
      : t_(tier), q_(queue), blocks_(blocks), compute_(compute), commit_(commit),
        stages_(tier.update_bufs_.size()) {}

  absl::Status Run() {
    while (true) {
      StartReads();
      if (ComputeNext()) continue;
      if (q_.in_flight() == 0) break;
      auto done = q_.Wait();
      if (!done.ok()) return done.status();  // the ring itself failed
      Reap(*done);
    }
    return first_error_;
  }

 private:
  enum class State { kFree, kReading, kReady, kFailed, kWriting };
  struct Stage {
    State state = State::kFree;
    uint64_t b = 0;
    BlockMeta meta;  // the block's metadata when its state was fetched
    io::IoRequest write;
    std::chrono::steady_clock::time_point started;
  };

  char* Buf(size_t s) { return t_.update_bufs_[s].data(); }

  void Fail(const absl::Status& s) {
    if (first_error_.ok()) first_error_ = s;
  }

  void Submit(size_t s, io::IoRequest r) {
    r.tag = s;  // Reap finds the stage by it
    stages_[s].started = std::chrono::steady_clock::now();
    absl::Status st = q_.Submit(r);
    if (!st.ok()) {
      Fail(ForBlock(stages_[s].b, st));
      stages_[s].state = r.op == io::IoOp::kRead ? State::kFailed : State::kFree;
    }
    if (t_.options_.metrics != nullptr) t_.options_.metrics->SetQueueDepth(q_.in_flight());
  }

  // Puts the next blocks into free stages: from the cache, as zeros when
  // never stored, or by starting a read of their current slot.
  void StartReads() {
    for (size_t s = 0; s < stages_.size() && next_read_ < blocks_.size(); ++s) {
      if (stages_[s].state != State::kFree) continue;
      const uint64_t b = blocks_[next_read_++];
      stages_[s] = Stage{State::kReady, b, t_.Meta(b), {}, {}};
      order_.push_back(s);
      const BlockMeta& m = stages_[s].meta;
      if (m.current < 0) {
        std::memset(Buf(s), 0, t_.layout_.payload_bytes);
        continue;
      }
      bool hit = t_.cache_.Get(b, Buf(s));
      if (t_.options_.metrics != nullptr) t_.options_.metrics->RecordCache(hit);
      if (hit) continue;
      stages_[s].state = State::kReading;
      Submit(s, t_.Request(io::IoOp::kRead, b, m.current, Buf(s)));
    }
  }

  // Computes the oldest block if its state is in memory and starts its
  // write. Returns false when it is still being read (or there is none).
  bool ComputeNext() {
    if (order_.empty() || stages_[order_.front()].state == State::kReading) return false;
    const size_t s = order_.front();
    order_.pop_front();
    Stage& st = stages_[s];
    if (st.state == State::kFailed || !compute_(st.b, reinterpret_cast<float*>(Buf(s)))) {
      st.state = State::kFree;
      return true;
    }
    st.state = State::kWriting;
    st.write = t_.PrepareWrite(st.b, st.meta, Buf(s));
    Submit(s, st.write);
    return true;
  }

  void Reap(const io::IoCompletion& done) {
    const size_t s = done.req.tag;
    Stage& st = stages_[s];
    auto elapsed = std::chrono::steady_clock::now() - st.started;
    t_.Record(done, std::chrono::duration<double>(elapsed).count());
    if (t_.options_.metrics != nullptr) t_.options_.metrics->SetQueueDepth(q_.in_flight());
    if (st.state == State::kReading) {
      absl::Status check = t_.CheckRead(done, st.b, st.meta);
      st.state = check.ok() ? State::kReady : State::kFailed;
      Fail(check);
      return;
    }
    absl::Status written = ForBlock(st.b, done.status());
    if (written.ok()) {
      {
        absl::MutexLock lock(&t_.block_mu_[st.b]);
        t_.CommitLocked(st.b, st.write, Buf(s));
      }
      commit_(st.b);  // takes the Job's block mutex: never under block_mu_
    }
    Fail(written);
    st.state = State::kFree;
  }

  NvmeTier& t_;
  io::IoQueue& q_;
  const std::vector<uint64_t>& blocks_;
  const Compute& compute_;
  const Commit& commit_;
  std::vector<Stage> stages_;
  std::deque<size_t> order_;  // stages holding blocks not yet computed, in block order
  size_t next_read_ = 0;
  absl::Status first_error_;
};

absl::Status NvmeTier::Update(const std::vector<uint64_t>& blocks, ThreadPool& pool,
                              const std::function<bool(uint64_t b, float* state)>& compute,
                              const std::function<void(uint64_t b)>& commit) {
  absl::MutexLock lock(&update_mu_);
  if (update_queue_ == nullptr) {  // a previous run's ring failed: start afresh
    auto queue = options_.env->NewQueue(options_.queue_depth);
    if (!queue.ok()) return queue.status();
    update_queue_ = *std::move(queue);
  }
  absl::Status s = UpdateRun(*this, *update_queue_, blocks, compute, commit).Run();
  if (!s.ok() && update_queue_->in_flight() > 0) update_queue_.reset();
  return s;
}

}  // namespace zerostate::server
