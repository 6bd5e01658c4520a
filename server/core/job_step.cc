#include "server/core/job_step.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/timeline.h"
#include "server/core/block_wait.h"

namespace zerostate::server {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds summed over the threads of a pass.
class ThreadSeconds {
 public:
  void Add(Clock::time_point start) {
    nanos_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
        std::memory_order_relaxed);
  }
  double seconds() const { return nanos_.load(std::memory_order_relaxed) * 1e-9; }

 private:
  std::atomic<int64_t> nanos_{0};
};

// Bit for bit: a speculation is confirmed only by the very same numbers.
bool SameParams(const StepParams& a, const StepParams& b) {
  return std::memcmp(&a.lr, &b.lr, sizeof(float)) == 0 &&
         std::memcmp(&a.grad_scale, &b.grad_scale, sizeof(float)) == 0 && a.t == b.t;
}

}  // namespace

JobStep::~JobStep() {
  {
    absl::MutexLock lock(&replicator_mu_);
    replicator_ = nullptr;
    owned_replicator_.reset();  // its thread stops before the blocks go
  }
  absl::MutexLock lock(&tasks_mu_);
  tasks_mu_.Await(absl::Condition(
      +[](uint64_t* tasks) { return *tasks == 0; }, &tasks_));
}

absl::Status JobStep::CheckRequest(const v1::StepRequest& req) {
  if (!std::isfinite(req.lr()) || req.lr() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("lr: ", req.lr(), " must be finite and >= 0"));
  }
  if (!std::isfinite(req.grad_scale()) || req.grad_scale() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_scale: ", req.grad_scale(), " must be finite and >= 0"));
  }
  return TrainerStates::Check(req.trainer_state());
}

StepParams JobStep::ParamsOf(const v1::StepRequest& req) const {
  StepParams params;
  params.config = spec().optimizer();
  params.lr = req.lr();
  params.grad_scale = req.grad_scale() == 0 ? 1.0f : req.grad_scale();
  params.t = applied_steps_.Before(req.step()) + 1;  // bias correction counts applied steps
  return params;
}

absl::Status JobStep::CheckStepWindow(const Block& b, uint64_t step, bool for_stats) const {
  if (step > b.version) {
    return absl::FailedPreconditionError(absl::StrCat("step: ", step, " is too far ahead; block ",
                                                      b.index, " is at version ", b.version,
                                                      " and step ", b.version, " comes first"));
  }
  if (step + 1 < b.version ||
      (for_stats && step + 1 == b.version && (!b.stats.has_value() || b.stats_step != step))) {
    return absl::FailedPreconditionError(absl::StrCat("step: ", step, " is from the past; block ",
                                                      b.index, " is already at version ",
                                                      b.version));
  }
  return absl::OkStatus();
}

absl::Status JobStep::AwaitGradients(Block& b, uint64_t step, absl::Time deadline,
                                     const std::function<bool()>& cancelled) const {
  return AwaitBlock(
      b, *env_.shutting_down, deadline,
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) { return b.version != step || b.acc.complete(); },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(b.mu) {
        return absl::StrCat("step ", step, ": block ", b.index,
                            " is still missing gradients from nodes [",
                            absl::StrJoin(b.acc.MissingNodes(), ", "), "]");
      },
      cancelled);
}

void JobStep::StatsOnComplete(Block& b) {
  if (!b.acc.complete() || (b.stats.has_value() && b.stats_step == b.version)) return;
  b.stats = b.acc.Stats();
  b.stats_step = b.version;
  b.PublishStats();
}

void JobStep::QueueStats(Block& b) {
  ThreadPool* pool = stats_pool_.load(std::memory_order_acquire);
  if (pool == nullptr || env_.shutting_down->load()) return;
  {
    absl::MutexLock lock(&tasks_mu_);
    ++tasks_;
  }
  pool->Schedule([this, local = b.local, version = b.version] {
    {
      Block& block = *blocks()[local];
      absl::MutexLock lock(&block.mu);
      if (block.version == version && !env_.shutting_down->load()) StatsOnComplete(block);
    }
    absl::MutexLock lock(&tasks_mu_);
    --tasks_;
  });
}

void JobStep::OnComplete(Block& b) {
  MaybeSpeculate(b);
  // The accumulator squared the sum as it became final, in the folds
  // (GradientAccumulator::Stats), so what is left to read is usually
  // nothing, and the statistics are taken here at once (a speculative
  // job's too: its GradStats then need not wait for the speculations).
  // Where something is left: a queued speculation reads it itself, right
  // before its step reads the same sum (Speculate); a sum streamed out of
  // cache (the first node's long pieces decoded with non-temporal stores,
  // as bf16 pushes of one node are, arriving out of order) would be read
  // back from memory here, on the push's path, so it is read on the stats
  // pool instead, while later blocks still arrive (Stats or the step's
  // commit computes those not done yet).
  const bool left = b.acc.complete() && b.acc.stats_at() < b.acc.required();
  if (!left) {
    StatsOnComplete(b);
  } else if (b.speculation() != Block::Speculation::kQueued) {
    if (b.acc.streamed()) {
      QueueStats(b);
    } else {
      StatsOnComplete(b);
    }
  }
  // Only once complete: a sum taken earlier could not be pinned and would
  // go only after the Step was decided, on its path.
  if (!b.acc.complete()) return;
  if (StepReplicator* r = replicator_.load(std::memory_order_acquire)) r->OnBlockComplete(b);
}

StepReplicator* JobStep::ReplicatorOrMake(
    const std::function<std::unique_ptr<StepReplicator>()>& make) {
  absl::MutexLock lock(&replicator_mu_);
  if (owned_replicator_ == nullptr) {
    owned_replicator_ = make();
    replicator_.store(owned_replicator_.get(), std::memory_order_release);
  }
  return owned_replicator_.get();
}

absl::StatusOr<GradStats> JobStep::Stats(uint64_t step, absl::Time deadline,
                                         StepPhaseTimes* times, ThreadPool* pool) {
  if (pool != nullptr) stats_pool_.store(pool, std::memory_order_release);
  auto start = Clock::now();
  // Blocks whose statistics of `step` are published are read without their
  // mutex; the rest (not complete yet, or their statistics left to this
  // call) are waited for.
  std::vector<GradStats> each(blocks().size());
  std::vector<size_t> rest;
  for (size_t i = 0; i < blocks().size(); ++i) {
    if (!blocks()[i]->PublishedStats(step, &each[i])) rest.push_back(i);
  }
  for (size_t i : rest) {
    Block& b = *blocks()[i];
    absl::MutexLock lock(&b.mu);
    if (auto s = CheckStepWindow(b, step, /*for_stats=*/true); !s.ok()) return s;
    if (auto st = AwaitGradients(b, step, deadline); !st.ok()) return st;
  }
  if (times != nullptr) times->wait_gradients = SecondsSince(start);
  start = Clock::now();
  // The push that completed each block computed its part (but for sums
  // streamed out of cache: computed here, on the pool); summed in block order.
  if (pool != nullptr) {
    std::vector<size_t> left;
    for (size_t i : rest) {
      Block& b = *blocks()[i];
      absl::MutexLock lock(&b.mu);
      if (b.version == step && b.acc.complete() &&
          (!b.stats.has_value() || b.stats_step != b.version)) {
        left.push_back(i);
      }
    }
    if (left.size() > 1) {
      pool->ParallelFor(left.size(), [&](size_t k) {
        Block& b = *blocks()[left[k]];
        absl::MutexLock lock(&b.mu);
        if (b.version == step) StatsOnComplete(b);
      });
    }
  }
  for (size_t i : rest) {
    Block& b = *blocks()[i];
    absl::MutexLock lock(&b.mu);
    if (b.version == step) StatsOnComplete(b);
    if (auto s = CheckStepWindow(b, step, /*for_stats=*/true); !s.ok()) return s;
    each[i] = *b.stats;
  }
  GradStats total;
  for (const GradStats& g : each) {
    total.sum_squares += g.sum_squares;
    total.nonfinite += g.nonfinite;
  }
  if (times != nullptr) times->grad_stats = SecondsSince(start);
  return total;
}

// --- Speculation ---

absl::StatusOr<StepOutcome> JobStep::StepAhead(const v1::StepRequest& req, ThreadPool& pool) {
  if (!spec().speculative_step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ahead: job ", spec().job_id(),
                     " was registered without speculative_step; send the Step only"));
  }
  if (auto s = CheckRequest(req); !s.ok()) return s;
  if (req.skip()) {
    return absl::InvalidArgumentError(
        "skip: a Step sent ahead assumes finite gradients; only the Step itself skips");
  }
  if (!req.trainer_state().empty()) {
    return absl::InvalidArgumentError(
        "trainer_state: only the Step itself records it, not the one sent ahead");
  }
  const uint64_t step = req.step();
  StepOutcome out;
  bool pending = false;
  for (const auto& bp : blocks()) {
    absl::MutexLock lock(&bp->mu);
    if (auto s = CheckStepWindow(*bp, step, /*for_stats=*/false); !s.ok()) return s;
    pending = pending || bp->version == step;
  }
  if (blocks().empty()) return out;
  out.version = pending ? step : step + 1;
  out.already_applied = !pending;
  if (!pending) return out;
  {
    absl::MutexLock lock(&ahead_mu_);
    ahead_ = Ahead{step, ParamsOf(req), &pool};
  }
  // Blocks completed before the parameters came; a push completing one
  // meanwhile may queue it too (Speculate runs it once).
  for (const auto& bp : blocks()) {
    absl::MutexLock lock(&bp->mu);
    MaybeSpeculate(*bp);
  }
  return out;
}

void JobStep::MaybeSpeculate(Block& b) {
  if (!b.speculative || b.speculation() != Block::Speculation::kNone || b.stepping() ||
      !b.acc.complete() || env_.shutting_down->load()) {
    return;
  }
  ThreadPool* pool = nullptr;
  {
    absl::MutexLock lock(&ahead_mu_);
    if (!ahead_.has_value() || ahead_->step != b.version) return;
    pool = ahead_->pool;
  }
  if (!b.QueueSpeculation().ok()) return;  // never: checked above
  {
    absl::MutexLock lock(&tasks_mu_);
    ++tasks_;
  }
  // One task per queued block; each takes the lowest block queued when it
  // runs, not this one (NeededFirstQueue).
  speculations_.Push(b.local);
  pool->Schedule([this] {
    if (std::optional<uint64_t> local = speculations_.Pop()) Speculate(*local);
    absl::MutexLock lock(&tasks_mu_);
    --tasks_;
  });
}

void JobStep::Speculate(uint64_t local) {
  Block& b = *blocks()[local];
  StepParams params;
  BlockRefs refs;
  const GradientAccumulator* acc = nullptr;  // its statistics still to take
  {
    absl::MutexLock lock(&b.mu);
    if (b.speculation() != Block::Speculation::kQueued) return;  // the Step came first
    const float* state = tier().Resident(local);  // null never: a speculative job is TIER_RAM
    bool may = !b.stepping() && b.acc.complete() && !env_.shutting_down->load() && state;
    if (may) {
      absl::MutexLock ahead_lock(&ahead_mu_);
      may = ahead_.has_value() && ahead_->step == b.version;
      if (may) params = ahead_->params;
    }
    if (!may) {
      (void)b.CancelSpeculation();  // kQueued: checked above
      return;
    }
    if (!(b.stats.has_value() && b.stats_step == b.version)) acc = &b.acc;
    if (b.next_state.empty()) b.next_state = AlignedBuffer<float>(tier().shape().block_floats());
    // Aside: the tier keeps the state at b.version (gathers and checkpoints
    // read it meanwhile) until the Step confirms this one.
    refs = RefsOf(b, b.next_state.data(), state);
    if (!b.BeginSpeculation().ok()) return;  // never: kQueued, not stepping
  }
  Timeline::Record("speculate_begin", static_cast<int64_t>(b.index));
  // Without the block's mutex: the Step's first phase, GradStats and the
  // gathers do not wait behind the speculations (a Step that comes now
  // commits the blocks already speculated while the later ones still
  // run: RunPass waits for this block alone). What the statistics and the
  // kernel read and write stays put until kRunning ends
  // (Block::AwaitSpeculation).
  if (acc != nullptr) {
    // The statistics first, published at once (GradStats reads them without
    // the mutex); the step then reads the summed gradient from cache.
    const GradStats stats = acc->Stats();
    absl::MutexLock lock(&b.mu);
    if (!(b.stats.has_value() && b.stats_step == b.version)) {  // GradStats may have taken them
      b.stats = stats;
      b.stats_step = b.version;
      b.PublishStats();
    }
  }
  StepBlockRuns(b.group_runs, GroupStepParams(spec(), params), refs);
  Timeline::Record("speculate_end", static_cast<int64_t>(b.index));
  absl::MutexLock lock(&b.mu);
  (void)b.FinishSpeculation(params);  // kRunning: only this task ends it
}

// --- The step ---

void JobStep::ComputeBlock(Block& b, float* to, const float* from,
                           const std::vector<StepParams>& by_group) {
  StepBlockRuns(b.group_runs, by_group, RefsOf(b, to, from));
}

BlockRefs JobStep::RefsOf(Block& b, float* to, const float* from) {
  const uint32_t be = tier().shape().block_elems;
  BlockRefs refs = StateRefs(tier().shape().layout(), to, from);
  refs.grad = b.acc.sum();  // one of the two is null
  refs.grad_bf16 = b.acc.landed_sum();
  refs.n = b.required;
  if (!b.lowp.empty()) {
    refs.lowp_dtype = spec().weight_dtype();
    // On a tier that updates in place (no store that may fail follows) the
    // copy goes straight to the gather waiting for it, if one is; a
    // speculation's too (the gather is answered once a Step commits it,
    // and one that ends first waits for a running speculation: DirectCopies).
    if (tier().in_place() && b.direct.to != nullptr && !b.direct.written &&
        b.direct.version == b.version + 1) {
      b.next_lowp_ready = false;
      b.pending_copy = Block::PendingCopy::kClient;
      refs.lowp = b.direct.to;
      return refs;
    }
    const bool aside = !tier().in_place() || b.speculative;
    if (aside && b.next_lowp.empty()) b.next_lowp = AlignedBuffer<uint16_t>(be);
    b.next_lowp_ready = aside;
    b.pending_copy = Block::PendingCopy::kOwn;
    refs.lowp = aside ? b.next_lowp.data() : b.lowp.data();
  }
  return refs;
}

void JobStep::DropNextLowp(Block& b) {
  b.next_lowp_ready = false;
  b.pending_copy = Block::PendingCopy::kNone;
  if (!b.speculative) b.next_lowp = AlignedBuffer<uint16_t>();
}

void JobStep::CommitBlock(Block& b) {
  b.AwaitSpeculation();  // it reads the sum Reset clears
  // Kept past the commit (a GradStats retried after the Step gets them):
  // a block whose push left them to later (OnComplete) gets them now.
  StatsOnComplete(b);
  if (b.next_lowp_ready) std::swap(b.lowp, b.next_lowp);
  // A copy written by this step (a skipped step writes none: the weights,
  // and so the copy, stay the previous version's).
  switch (b.pending_copy) {
    case Block::PendingCopy::kClient:
      b.direct.written = true;
      b.lowp_current = false;
      break;
    case Block::PendingCopy::kGone:
      b.lowp_current = false;
      break;
    case Block::PendingCopy::kOwn:
      b.lowp_current = true;
      break;
    case Block::PendingCopy::kNone:
      break;
  }
  DropNextLowp(b);
  (void)b.Commit();  // not kRunning: awaited above
}

bool JobStep::CopyOnWrite(Block& b, const float* state) {
  if (b.version != env_.cow_version->load()) return false;
  if (b.kept.held() && b.kept.version() != b.version)
    return false;  // never: one checkpoint at a time
  return b.kept.Keep(b.version, state, tier().shape().block_floats());
}

absl::Status JobStep::RunPass(uint64_t step, const StepParams& params, ThreadPool& pool,
                              uint64_t* stepped, StepOutcome* out) {
  std::vector<uint64_t> todo;
  for (const auto& bp : blocks()) {
    absl::MutexLock lock(&bp->mu);
    if (bp->version == step) todo.push_back(bp->local);
  }
  std::atomic<uint64_t> count{0}, confirmed{0}, redone{0};
  const std::vector<StepParams> by_group = GroupStepParams(spec(), params);
  std::atomic<bool> copied{false};
  ThreadSeconds commit_time, cow_time;
  auto compute = [&](uint64_t local, float* state) {
    Block& b = *blocks()[local];
    absl::MutexLock lock(&b.mu);
    b.AwaitSpeculation();  // its result, in a moment
    if (b.version != step) return false;
    const auto start = Clock::now();
    if (CopyOnWrite(b, state)) {
      cow_time.Add(start);
      copied = true;
    }
    if (!b.BeginStep().ok()) return false;  // never: one pass at a time, speculation awaited
    if (b.speculation() == Block::Speculation::kDone) {
      // The same parameters, bit for bit: the speculated state becomes the
      // block's, without a copy. Else (clipping, another lr) the plain step
      // below, from the tier's state, which the speculation left alone.
      if (SameParams(b.spec_params(), params) && tier().Exchange(local, b.next_state).ok()) {
        ++confirmed;
        return true;
      }
      ++redone;
    }
    (void)b.DropSpeculation();  // a queued one comes too late; not kRunning: awaited above
    ComputeBlock(b, state, state, by_group);
    return true;
  };
  auto commit = [&](uint64_t local) {
    const auto start = Clock::now();
    Block& b = *blocks()[local];
    absl::MutexLock lock(&b.mu);
    CommitBlock(b);
    count += b.required;
    commit_time.Add(start);
  };
  const auto start = Clock::now();
  absl::Status s = tier().Update(todo, pool, compute, commit);
  out->times.optimizer = SecondsSince(start);
  out->times.commit = commit_time.seconds();
  if (copied) out->times.copy_on_write = cow_time.seconds();
  // A block whose new state could not be stored was never committed: it
  // keeps its previous state (StateTier::Update), readable again.
  for (uint64_t local : todo) {
    Block& b = *blocks()[local];
    absl::MutexLock lock(&b.mu);
    if (!b.AbortStep().ok()) continue;  // committed, or never begun
    DropNextLowp(b);
  }
  *stepped = count.load();
  out->blocks_confirmed = confirmed.load();
  out->blocks_redone = redone.load();
  return s;
}

absl::StatusOr<uint64_t> JobStep::SkipPass(uint64_t step, StepOutcome* out) {
  const size_t floats = tier().shape().block_floats();
  // First the state a running checkpoint needs of each block the skip moves
  // past its version, so that a tier that cannot load one fails the Step
  // with its own error, naming the block, before any block is skipped.
  for (const auto& bp : blocks()) {
    Block& b = *bp;
    absl::MutexLock lock(&b.mu);
    if (b.version != step || b.version != env_.cow_version->load() || b.kept.held()) continue;
    AlignedBuffer<float> state(floats);
    if (auto s = tier().Load(b.local, state.data()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("step ", step, " (skip): saving block ", b.index,
                                                  " for the checkpoint of version ", b.version,
                                                  "; nothing was skipped: ", s.message()));
    }
    b.kept.Keep(b.version, state.data(), floats);
  }
  uint64_t skipped = 0;
  for (const auto& bp : blocks()) {
    Block& b = *bp;
    absl::MutexLock lock(&b.mu);
    b.AwaitSpeculation();
    if (b.version != step) continue;
    // A speculation is dropped: the tier's state is the one it left alone.
    if (b.speculation() == Block::Speculation::kDone) ++out->blocks_redone;
    DropNextLowp(b);
    CommitBlock(b);
    skipped += b.required;
  }
  return skipped;
}

absl::StatusOr<StepOutcome> JobStep::Step(const v1::StepRequest& req, absl::Time deadline,
                                          ThreadPool& pool,
                                          const std::function<bool()>& cancelled,
                                          StepReplicator* replicator) {
  if (req.ahead()) return StepAhead(req, pool);
  if (auto s = CheckRequest(req); !s.ok()) return s;
  const uint64_t step = req.step();
  StepOutcome out;
  Timeline::Record("step_begin", static_cast<int64_t>(step), spec().replicas());
  // Phase 1: every block is in the window and complete, before anything changes.
  const auto start = Clock::now();
  bool pending = false;  // a block still to step (else a retry: already applied)
  for (const auto& bp : blocks()) {
    Block& b = *bp;
    absl::MutexLock lock(&b.mu);
    if (auto s = CheckStepWindow(b, step, /*for_stats=*/false); !s.ok()) return s;
    if (auto st = AwaitGradients(b, step, deadline, cancelled); !st.ok()) return st;
    pending = pending || b.version == step;
  }
  out.times.wait_gradients = SecondsSince(start);
  Timeline::Record("step_gradients_in", static_cast<int64_t>(step));
  std::function<absl::Status()> acked;  // the backups' acknowledgement, waited for unlocked
  const absl::Status ran =
      Decided(req, deadline, pool, cancelled, replicator, pending, &out, &acked);
  Timeline::Record("pass_end", static_cast<int64_t>(step), spec().replicas());
  // The pass committed here and let the pass mutex go: checkpoints,
  // reseeds and the next step's decision do not queue behind the network.
  absl::Status backups = AwaitBackups(acked, step, &out);
  if (!ran.ok()) return ran;
  if (!backups.ok()) return backups;
  Timeline::Record("step_end", static_cast<int64_t>(step));
  return out;
}

absl::Status JobStep::Decided(const v1::StepRequest& req, absl::Time deadline,
                                             ThreadPool& pool,
                                             const std::function<bool()>& cancelled,
                                             StepReplicator* replicator, bool pending,
                                             StepOutcome* out,
                                             std::function<absl::Status()>* acked) {
  const uint64_t step = req.step();
  absl::MutexLock pass_lock(&pass_mu_);
  // One step's acknowledgement at a time: the replicator carries one step
  // (a retry that comes meanwhile finds it acknowledged, or resends it).
  pass_mu_.Await(absl::Condition(
      +[](bool* awaiting) { return !*awaiting; }, &awaiting_backups_));
  // The decision: applied only while the caller still waits for the answer
  // (the deadline is a margin before the caller's, answer_deadline.h).
  if (pending && cancelled && cancelled()) {
    return absl::CancelledError(absl::StrCat(
        "step ", step, ": cancelled by the caller before it was applied; nothing changed"));
  }
  if (pending && absl::Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "step ", step, ": the call's deadline came before it was applied; nothing changed"));
  }
  // The backups get the step while it runs here; answered once they hold it.
  const auto decide_start = Clock::now();
  *acked = Replicate(replicator, req, pending);
  if (*acked) {
    out->times.replicate = SecondsSince(decide_start);
    visibility_.HoldBack(step);  // step + 1 is served once the backups hold it
    awaiting_backups_ = true;
  }
  // Before any block commits: a gather of step + 1 may be answered then.
  if (!req.trainer_state().empty()) trainer_states_.Record(step + 1, req.trainer_state());
  if (blocks().empty()) {  // an empty shard: nothing to step, the count kept alike
    if (req.skip()) applied_steps_.RecordSkip(step);
    return absl::OkStatus();  // version 0, not applied
  }
  // Phase 2: the fused optimizer pass, blocks spread over the pool.
  uint64_t stepped = 0;
  if (req.skip()) {
    auto skipped = SkipPass(step, out);
    if (!skipped.ok()) return skipped.status();
    stepped = *skipped;
    if (stepped > 0) applied_steps_.RecordSkip(step);
  } else {
    if (auto s = RunPass(step, ParamsOf(req), pool, &stepped, out); !s.ok()) return s;
  }
  out->version = step + 1;
  out->already_applied = stepped == 0;
  out->params_stepped = req.skip() ? 0 : stepped;
  return absl::OkStatus();
}

absl::Status JobStep::AwaitBackups(const std::function<absl::Status()>& acked, uint64_t step,
                                   StepOutcome* out) {
  if (!acked) return absl::OkStatus();
  const auto wait_start = Clock::now();
  absl::Status s = acked();
  out->times.backups = SecondsSince(wait_start);
  {
    absl::MutexLock pass_lock(&pass_mu_);
    awaiting_backups_ = false;
    // Unless a reseed came meanwhile (it made every version visible).
    if (s.ok() && unacked_ != nullptr && unacked_->request.step() == step) {
      unacked_.reset();
      visibility_.ShowAll();
    }
  }
  return s;
}

void JobStep::Reseeded() {
  absl::MutexLock pass_lock(&pass_mu_);
  unacked_.reset();
  visibility_.Undepose();  // and every version visible
}

std::function<absl::Status()> JobStep::Replicate(StepReplicator* replicator,
                                                 const v1::StepRequest& req, bool pending) {
  if (replicator == nullptr) return nullptr;
  if (!pending) {  // a retry: only what the backups may lack
    if (unacked_ == nullptr || unacked_->request.step() != req.step()) return nullptr;
    return replicator->Resend(unacked_);
  }
  return replicator->Decide(req, &unacked_);
}

}  // namespace zerostate::server
