// The state server's logic driven without a network: every semantic of a
// step (order-independent sums, exactly once, versions) and every bad input,
// each checked to leave the job exactly as it was.
#include "server/core/job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/convert.h"
#include "common/init.h"
#include "common/job_spec.h"
#include "server/core/aligned_buffer.h"
#include "server/core/job_registry.h"
#include "tests/server/gather_weights.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 256;

v1::RegisterJobRequest MakeRequest(uint32_t nodes = 2, v1::DType weight = v1::DTYPE_FP32) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("job");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(20);
  w->add_shape(30);
  auto* b = spec->add_tensors();
  b->set_name("b");
  b->add_shape(20);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->mutable_optimizer()->set_weight_decay(0.01f);
  spec->set_num_nodes(nodes);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(weight);
  spec->set_block_elems(kBlock);
  spec->set_seed(5);
  req.add_servers("a:1");
  req.set_shard_index(0);
  return req;
}

v1::Chunk GradChunk(uint64_t step, uint32_t node, uint64_t block, uint32_t offset,
                    const std::vector<float>& g) {
  v1::Chunk c;
  c.set_job_id("job");
  c.set_step(step);
  c.set_node(node);
  c.set_block(block);
  c.set_offset(offset);
  c.set_dtype(v1::DTYPE_FP32);
  c.set_data(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  return c;
}

class JobTest : public ::testing::Test {
 protected:
  JobTest() : registry_(1 << 30), pool_(2) {
    auto reg = registry_.Register(MakeRequest());
    EXPECT_TRUE(reg.ok()) << reg.status();
    job_ = reg->job;
  }

  std::vector<float> Grad(uint32_t node, uint64_t step) {
    std::mt19937 rng(node * 1000 + step);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> g(job_->layout().total_elems);  // padding stays zero
    for (const TensorSlot& t : job_->layout().tensors) {
      for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) g[i] = d(rng);
    }
    return g;
  }

  // Pushes a node's whole gradient block by block.
  void PushAll(uint32_t node, uint64_t step, const std::vector<float>& g) {
    for (uint64_t b = 0; b < job_->layout().num_blocks(); ++b) {
      std::vector<float> piece(g.begin() + b * kBlock, g.begin() + (b + 1) * kBlock);
      auto r = job_->pushes().Push(GradChunk(step, node, b, 0, piece));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }

  std::vector<float> Weights(uint64_t min_version = 0) { return GatherWeights(*job_, min_version); }

  absl::StatusOr<StepOutcome> DoStep(uint64_t step, absl::Duration wait = absl::Seconds(5)) {
    v1::StepRequest req;
    req.set_job_id("job");
    req.set_step(step);
    req.set_lr(1e-2f);
    req.set_grad_scale(0.5f);
    return job_->step().Step(req, absl::Now() + wait, pool_);
  }

  // What DoStep does to `param`, `m` and `v` with the summed gradient
  // `sum`, as the kernel's step number `t` (1-based).
  void ReferenceStep(const std::vector<float>& sum, uint64_t t, std::vector<float>& param,
                     std::vector<float>& m, std::vector<float>& v) {
    StepParams p;
    p.config = job_->spec().optimizer();
    p.lr = 1e-2f;
    p.grad_scale = 0.5f;
    p.t = t;
    for (uint64_t b = 0; b < job_->layout().num_blocks(); ++b) {
      BlockRefs r;
      r.param = param.data() + b * kBlock;
      r.m = m.data() + b * kBlock;
      r.v = v.data() + b * kBlock;
      r.grad = sum.data() + b * kBlock;
      r.n = std::min<uint64_t>(kBlock, job_->layout().used_elems - b * kBlock);
      StepBlock(p, r);
    }
  }

  JobRegistry registry_;
  ThreadPool pool_;
  std::shared_ptr<Job> job_;
};

std::vector<float> Sum(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> sum(a.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

TEST_F(JobTest, StepMatchesTheKernelOnTheNodeOrderedSum) {
  auto w0 = Weights();
  std::vector<float> expected(job_->layout().total_elems);
  FillInitialWeights(job_->layout(), 5, Range{0, expected.size()}, expected.data());
  ASSERT_EQ(w0, expected);

  auto g0 = Grad(0, 0), g1 = Grad(1, 0);
  PushAll(1, 0, g1);  // node 1 first: the server must still sum g0 + g1
  PushAll(0, 0, g0);
  auto stats = job_->step().Stats(0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(stats.ok()) << stats.status();
  double ss = 0;
  std::vector<float> sum(g0.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = g0[i] + g1[i];
    ss += static_cast<double>(sum[i]) * sum[i];
  }
  EXPECT_NEAR(stats->sum_squares, ss, 1e-9 * ss);
  EXPECT_EQ(stats->nonfinite, 0u);

  auto out = DoStep(0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->version, 1u);
  EXPECT_FALSE(out->already_applied);

  std::vector<float> m(sum.size()), v(sum.size());
  ReferenceStep(sum, 1, expected, m, v);
  auto w1 = Weights(1);
  ASSERT_EQ(w1.size(), expected.size());
  EXPECT_EQ(std::memcmp(w1.data(), expected.data(), w1.size() * 4), 0);
}

TEST_F(JobTest, RetriedPushesAndStepsApplyOnce) {
  auto g = Grad(0, 0);
  PushAll(0, 0, g);
  std::vector<float> piece(g.begin(), g.begin() + kBlock);
  EXPECT_EQ(*job_->pushes().Push(GradChunk(0, 0, 0, 0, piece)), PushOutcome::kDuplicate);
  PushAll(1, 0, g);
  ASSERT_TRUE(DoStep(0).ok());
  auto w1 = Weights(1);
  auto again = DoStep(0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_applied);
  // A late retry of a push for the applied step is acknowledged and ignored.
  EXPECT_EQ(*job_->pushes().Push(GradChunk(0, 1, 0, 0, piece)), PushOutcome::kDuplicate);
  EXPECT_EQ(Weights(1), w1);
  EXPECT_EQ(job_->shard().Progress().min_version, 1u);
}

// A push that overlaps node 0's payload still arriving in place (a retry
// racing its first attempt) waits for that attempt to end, up to its
// deadline: a duplicate once it committed, applied once it was given back.
// Without a deadline it is UNAVAILABLE at once, and nothing changes.
TEST_F(JobTest, PushRacingAnInPlaceReceiveWaitsForIt) {
  auto g = Grad(0, 0);
  // Claims block `block`'s piece of node 0, races a push of it, then
  // commits the claim or gives it back; returns what the racing push got.
  auto race = [&](uint64_t block, bool commit) -> absl::StatusOr<PushOutcome> {
    std::vector<float> piece(g.begin() + block * kBlock, g.begin() + (block + 1) * kBlock);
    const v1::Chunk chunk = GradChunk(0, 0, block, 0, piece);
    PushClaim claim = job_->pushes().ClaimPush(ViewOf(chunk).fields, kBlock * 4);
    EXPECT_NE(claim.data(), nullptr);
    if (claim.data() == nullptr) return absl::InternalError("no claim");
    auto at_once = job_->pushes().Push(chunk);
    EXPECT_EQ(at_once.status().code(), absl::StatusCode::kUnavailable) << at_once.status();
    absl::StatusOr<PushOutcome> raced = absl::UnknownError("not run");
    std::thread retry([&] { raced = job_->pushes().Push(chunk, absl::Now() + absl::Seconds(10)); });
    if (commit) {
      std::memcpy(claim.data(), piece.data(), kBlock * 4);
      EXPECT_TRUE(claim.Commit().ok());
    } else {
      claim = PushClaim();  // the payload never arrived whole
    }
    retry.join();
    return raced;
  };
  auto committed = race(0, true);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(*committed, PushOutcome::kDuplicate);
  auto given_back = race(1, false);
  ASSERT_TRUE(given_back.ok()) << given_back.status();
  EXPECT_EQ(*given_back, PushOutcome::kApplied);
  // Both pieces are in once: the rest of the step completes it as usual.
  for (uint64_t b = 2; b < job_->layout().num_blocks(); ++b) {
    std::vector<float> piece(g.begin() + b * kBlock, g.begin() + (b + 1) * kBlock);
    ASSERT_TRUE(job_->pushes().Push(GradChunk(0, 0, b, 0, piece)).ok());
  }
  PushAll(1, 0, Grad(1, 0));
  EXPECT_TRUE(DoStep(0).ok());
}

// A trainer may push tensor by tensor, leaving out the alignment padding
// between them: the step completes, and padding weights stay zero even
// when a node does push non-zero padding.
TEST_F(JobTest, TensorsPushedWithoutTheirPaddingCompleteTheStep) {
  const Layout& layout = job_->layout();
  auto g0 = Grad(0, 0);
  for (const TensorSlot& t : layout.tensors) {
    for (uint64_t at = t.offset; at < t.offset + t.numel;) {
      const uint64_t block = at / kBlock;
      const uint64_t end = std::min(t.offset + t.numel, (block + 1) * kBlock);
      std::vector<float> piece(g0.begin() + at, g0.begin() + end);
      auto r =
          job_->pushes().Push(GradChunk(0, 0, block, static_cast<uint32_t>(at % kBlock), piece));
      ASSERT_TRUE(r.ok()) << r.status();
      at = end;
    }
  }
  auto g1 = Grad(1, 0);
  std::fill(g1.begin() + layout.tensors[0].offset + layout.tensors[0].numel,
            g1.begin() + layout.tensors[1].offset, 7.0f);  // non-zero padding
  PushAll(1, 0, g1);
  ASSERT_TRUE(DoStep(0).ok());
  const std::vector<float> w = Weights(1);
  for (uint64_t i = layout.tensors[0].offset + layout.tensors[0].numel;
       i < layout.tensors[1].offset; ++i) {
    ASSERT_EQ(w[i], 0.0f) << "padding element " << i;
  }
}

// The statistics are each block's ComputeGradStats of the node-ordered
// sum, added in block order, bit for bit, whichever path completed the
// block (and computed its part): node 0's payload received in place, the
// head node's push, or an early node's staged pieces folded in its turn.
TEST_F(JobTest, StatsAreThePerBlockKernelAddedInBlockOrder) {
  const auto g0 = Grad(0, 0), g1 = Grad(1, 0);
  const uint64_t blocks = job_->layout().num_blocks();
  auto piece = [&](const std::vector<float>& g, uint64_t b) {
    return std::vector<float>(g.begin() + b * kBlock, g.begin() + (b + 1) * kBlock);
  };
  const v1::Chunk first = GradChunk(0, 0, 0, 0, piece(g0, 0));
  PushClaim claim = job_->pushes().ClaimPush(ViewOf(first).fields, kBlock * 4);
  ASSERT_NE(claim.data(), nullptr);
  std::memcpy(claim.data(), first.data().data(), kBlock * 4);
  ASSERT_TRUE(claim.Commit().ok());
  ASSERT_TRUE(job_->pushes().Push(GradChunk(0, 1, 0, 0, piece(g1, 0))).ok());
  for (uint64_t b = 1; b < blocks; ++b) {
    const uint32_t early = b % 2;  // odd blocks: node 1 early, folded when node 0 completes
    ASSERT_TRUE(job_->pushes().Push(GradChunk(0, early, b, 0, piece(early ? g1 : g0, b))).ok());
    ASSERT_TRUE(job_->pushes().Push(GradChunk(0, 1 - early, b, 0, piece(early ? g0 : g1, b))).ok());
  }
  AlignedBuffer<float> sum(blocks * kBlock);
  for (size_t i = 0; i < g0.size(); ++i) sum.data()[i] = g0[i] + g1[i];
  GradStats expected;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t n = std::min<uint64_t>(kBlock, job_->layout().used_elems - b * kBlock);
    const GradStats part = ComputeGradStats(sum.data() + b * kBlock, n);
    expected.sum_squares += part.sum_squares;
    expected.nonfinite += part.nonfinite;
  }
  auto stats = job_->step().Stats(0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->sum_squares, expected.sum_squares);
  EXPECT_EQ(stats->nonfinite, expected.nonfinite);
  // Asked again after the step, the same.
  ASSERT_TRUE(DoStep(0).ok());
  auto again = job_->step().Stats(0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->sum_squares, expected.sum_squares);
}

// A one-node job whose bf16 pieces are long enough to be streamed into the
// sum (GradientAccumulator::streamed()): its statistics, squared by the
// folds of pieces in order (even blocks) or, for pieces out of order (odd
// blocks: the second half first), left by the push to Stats (on its pool),
// to the tasks the push queues on the stats pool once a Stats gave one, or
// to the step's commit, are still each block's ComputeGradStats added in
// block order, bit for bit, and kept past the step's commit whether or not
// Stats ran before it. Step 0: Stats with the pool; step 1: the pushes
// queue the statistics, Stats (no pool) comes while they may still run;
// step 2: no Stats before the Step.
TEST(JobStreamedSumTest, StatsAreTheSameAndKeptPastTheCommit) {
  constexpr uint32_t kBig = 32768;  // two streamed pieces of 16384 per block
  constexpr uint32_t kHalf = kBig / 2;
  v1::RegisterJobRequest req = MakeRequest(/*nodes=*/1);
  v1::JobSpec* spec = req.mutable_spec();
  spec->clear_tensors();
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(2 * kBig + 100);
  spec->set_grad_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(kBig);
  JobRegistry registry(1 << 30);
  ThreadPool pool(2);
  auto reg = registry.Register(req);
  ASSERT_TRUE(reg.ok()) << reg.status();
  Job& job = *reg->job;
  const uint64_t blocks = job.layout().num_blocks();
  ASSERT_EQ(blocks, 3u);
  for (uint64_t step = 0; step < 3; ++step) {
    std::mt19937 rng(step + 7);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> g(blocks * kBig, 0.0f);
    for (uint64_t i = 0; i < 2 * kBig + 100; ++i) g[i] = d(rng);  // the tensor; padding stays 0
    std::vector<uint16_t> wire(g.size());
    EncodeFloats(g.data(), g.size(), v1::DTYPE_BF16, wire.data());
    DecodeFloats(wire.data(), wire.size(), v1::DTYPE_BF16, g.data());  // what the sum holds
    GradStats expected;
    for (uint64_t b = 0; b < blocks; ++b) {
      for (uint32_t half : {b % 2, 1 - b % 2}) {
        v1::Chunk c;
        c.set_job_id("job");
        c.set_step(step);
        c.set_node(0);
        c.set_block(b);
        c.set_offset(half * kHalf);
        c.set_dtype(v1::DTYPE_BF16);
        c.set_data(std::string(
            reinterpret_cast<const char*>(wire.data() + b * kBig + half * kHalf), kHalf * 2));
        auto pushed = job.pushes().Push(c);
        ASSERT_TRUE(pushed.ok()) << pushed.status();
      }
      const uint64_t n = std::min<uint64_t>(kBig, job.layout().used_elems - b * kBig);
      const GradStats part = ComputeGradStats(g.data() + b * kBig, n);
      expected.sum_squares += part.sum_squares;
      expected.nonfinite += part.nonfinite;
    }
    if (step < 2) {  // asked before the step; step 2: first after it
      auto stats = job.step().Stats(step, absl::Now() + absl::Seconds(5), nullptr,
                                    step == 0 ? &pool : nullptr);
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(stats->sum_squares, expected.sum_squares);
    }
    v1::StepRequest step_req;
    step_req.set_job_id("job");
    step_req.set_step(step);
    step_req.set_lr(1e-2f);
    step_req.set_grad_scale(1.0f);
    auto out = job.step().Step(step_req, absl::Now() + absl::Seconds(5), pool);
    ASSERT_TRUE(out.ok()) << out.status();
    auto after = job.step().Stats(step, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(after.ok()) << "step " << step << ": " << after.status();
    EXPECT_EQ(after->sum_squares, expected.sum_squares) << "step " << step;
    EXPECT_EQ(after->nonfinite, 0u);
  }
}

// Each call says which phases of the step it went through
// (zerostate_step_phase_seconds): Stats the wait and the statistics, Step
// the wait and its pass; copy-on-write only when a checkpoint needed a
// snapshot.
// A primary's replicator hears of a block once its sum is complete, every
// node's piece in, whatever order they come in (a block it heard of
// earlier could not be pinned to be sent ahead of the Step).
class CompletedBlocks final : public StepReplicator {
 public:
  void OnBlockComplete(const Block& b) override {
    EXPECT_TRUE(b.acc.complete()) << "block " << b.index;
    heard.push_back(b.index);
  }
  std::function<absl::Status()> Decide(const v1::StepRequest&,
                                       std::shared_ptr<const Payload>*) override {
    return [] { return absl::OkStatus(); };
  }
  std::function<absl::Status()> Resend(std::shared_ptr<const Payload>) override {
    return [] { return absl::OkStatus(); };
  }
  std::vector<uint64_t> heard;
};

TEST_F(JobTest, TheReplicatorHearsOfABlockOnceItsSumIsComplete) {
  CompletedBlocks* heard = nullptr;
  job_->step().ReplicatorOrMake([&] {
    auto r = std::make_unique<CompletedBlocks>();
    heard = r.get();
    return r;
  });
  const std::vector<float> g0 = Grad(0, 0), g1 = Grad(1, 0);
  auto push = [&](uint32_t node, uint64_t b, uint32_t offset, uint32_t count) {
    const std::vector<float>& g = node == 0 ? g0 : g1;
    std::vector<float> piece(g.begin() + b * kBlock + offset,
                             g.begin() + b * kBlock + offset + count);
    auto r = job_->pushes().Push(GradChunk(0, node, b, offset, piece));
    ASSERT_TRUE(r.ok()) << r.status();
  };
  push(0, 0, 0, kBlock);  // node 0 first
  push(1, 1, 0, 100);     // node 1 early, in two pieces
  push(1, 1, 100, kBlock - 100);
  EXPECT_TRUE(heard->heard.empty());
  push(1, 0, 0, kBlock);  // block 0 complete
  EXPECT_EQ(heard->heard, (std::vector<uint64_t>{0}));
  push(0, 1, 0, kBlock);  // block 1 complete: node 1's staged pieces folded
  EXPECT_EQ(heard->heard, (std::vector<uint64_t>{0, 1}));
}

TEST_F(JobTest, StatsAndStepReportTheirPhases) {
  auto phases = [](const StepPhaseTimes& t) {
    std::vector<std::string> names;
    t.ForEach([&](const char* name, double seconds) {
      EXPECT_GE(seconds, 0) << name;
      names.push_back(name);
    });
    return names;
  };
  using Names = std::vector<std::string>;
  PushAll(0, 0, Grad(0, 0));
  PushAll(1, 0, Grad(1, 0));
  StepPhaseTimes stats_times;
  ASSERT_TRUE(job_->step().Stats(0, absl::Now() + absl::Seconds(5), &stats_times).ok());
  EXPECT_EQ(phases(stats_times), (Names{"wait_gradients", "grad_stats"}));
  auto out = DoStep(0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(phases(out->times), (Names{"wait_gradients", "optimizer", "commit"}));

  auto guard = job_->snapshots().BeginCheckpoint(1);  // step 1 saves every block first
  ASSERT_TRUE(guard.ok()) << guard.status();
  PushAll(0, 1, Grad(0, 1));
  PushAll(1, 1, Grad(1, 1));
  out = DoStep(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(phases(out->times), (Names{"wait_gradients", "optimizer", "commit", "copy_on_write"}));
}

TEST_F(JobTest, SkippedStepAdvancesVersionOnly) {
  auto g = Grad(0, 0);
  PushAll(0, 0, g);
  PushAll(1, 0, g);
  auto w0 = Weights();
  v1::StepRequest req;
  req.set_step(0);
  req.set_skip(true);
  auto out = job_->step().Step(req, absl::Now() + absl::Seconds(5), pool_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Weights(1), w0);
  EXPECT_EQ(job_->shard().Progress().min_version, 1u);
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << "'" << needle << "' not in: " << s;
}

// Adam's bias correction counts applied steps, as torch's GradScaler and
// DeepSpeed's overflow skip do (the optimizer's step is not called): after
// a skipped step 1, step 2 is the optimizer's second step (t = 2, not 3).
TEST_F(JobTest, SkippedStepsDoNotCountTowardsBiasCorrection) {
  std::vector<float> expected = Weights();
  std::vector<float> m(expected.size()), v(expected.size());
  uint64_t applied = 0;
  for (uint64_t step = 0; step < 4; ++step) {
    const bool skip = step == 1;
    auto g0 = Grad(0, step), g1 = Grad(1, step);
    PushAll(0, step, g0);
    PushAll(1, step, g1);
    v1::StepRequest req;
    req.set_step(step);
    req.set_lr(1e-2f);
    req.set_grad_scale(0.5f);
    req.set_skip(skip);
    auto out = job_->step().Step(req, absl::Now() + absl::Seconds(5), pool_);
    ASSERT_TRUE(out.ok()) << out.status();
    if (!skip) ReferenceStep(Sum(g0, g1), ++applied, expected, m, v);
  }
  auto w = Weights(4);
  ASSERT_EQ(w.size(), expected.size());
  EXPECT_EQ(std::memcmp(w.data(), expected.data(), w.size() * 4), 0);
}

// A Step whose caller cancels is never applied afterwards, wherever in its
// wait the cancellation comes. `cancelled` is the hook: each time the wait
// asks it, node 0's next block arrives (so the wait moves on block by
// block), and the i-th question answers "cancelled". i = 1..blocks cancels
// at block i - 1 just as its gradients completed; i = blocks + 1 at the
// decision, after every gradient arrived. Then the rest arrives, and the
// next Step applies with its own parameters.
TEST_F(JobTest, ACancelledStepIsNeverAppliedWhereverItsWaitWas) {
  const uint64_t blocks = job_->layout().num_blocks();
  ASSERT_GE(blocks, 2u);
  auto g0 = Grad(0, 0), g1 = Grad(1, 0);
  auto push0 = [&](uint64_t b) {
    std::vector<float> piece(g0.begin() + b * kBlock, g0.begin() + (b + 1) * kBlock);
    EXPECT_TRUE(job_->pushes().Push(GradChunk(0, 0, b, 0, piece)).ok());
  };
  for (uint64_t i = 1; i <= blocks + 1; ++i) {
    SCOPED_TRACE(testing::Message() << "cancelled at question " << i);
    auto created = Job::Create(*NormalizeJobSpec(MakeRequest().spec()), {"a:1"}, 0);
    ASSERT_TRUE(created.ok()) << created.status();
    job_ = *std::move(created);
    std::vector<float> w0 = Weights();
    PushAll(1, 0, g1);
    uint64_t asked = 0, pushed = 0;
    std::function<bool()> cancelled = [&] {
      if (pushed < blocks) push0(pushed++);
      return ++asked == i;
    };
    v1::StepRequest abandoned;
    abandoned.set_step(0);
    abandoned.set_lr(0.5f);
    auto out = job_->step().Step(abandoned, absl::Now() + absl::Seconds(60), pool_, cancelled);
    ExpectError(out.status(), absl::StatusCode::kCancelled, "cancelled by the caller");
    EXPECT_EQ(asked, i);
    while (pushed < blocks) push0(pushed++);
    EXPECT_EQ(job_->shard().Progress().min_version, 0u);
    EXPECT_EQ(Weights(), w0);
    auto next = DoStep(0);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_FALSE(next->already_applied);
    std::vector<float> m(w0.size()), v(w0.size());
    ReferenceStep(Sum(g0, g1), 1, w0, m, v);
    EXPECT_EQ(Weights(1), w0);
  }
}

// A Step whose deadline passes as its gradients complete is not applied
// either: the decision comes only before the deadline.
TEST_F(JobTest, AStepPastItsDeadlineAtTheDecisionIsNotApplied) {
  auto g = Grad(0, 0);
  PushAll(0, 0, g);
  PushAll(1, 0, g);
  v1::StepRequest req;
  req.set_step(0);
  req.set_lr(1e-2f);
  ExpectError(job_->step().Step(req, absl::Now() - absl::Milliseconds(1), pool_).status(),
              absl::StatusCode::kDeadlineExceeded, "before it was applied; nothing changed");
  EXPECT_EQ(job_->shard().Progress().min_version, 0u);
  ASSERT_TRUE(DoStep(0).ok());
  // A retry of an applied step is answered whatever its deadline.
  auto again = job_->step().Step(req, absl::Now() - absl::Milliseconds(1), pool_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_applied);
}

TEST_F(JobTest, BadPushesAreRefusedAndChangeNothing) {
  auto before = Weights();
  std::vector<float> piece(kBlock, 1.0f);
  uint64_t nb = job_->layout().num_blocks();
  ExpectError(job_->pushes().Push(GradChunk(0, 0, nb, 0, piece)).status(),
              absl::StatusCode::kInvalidArgument, "block");
  ExpectError(job_->pushes().Push(GradChunk(0, 0, 0, 10, piece)).status(),
              absl::StatusCode::kInvalidArgument, "offset");
  ExpectError(job_->pushes().Push(GradChunk(0, 2, 0, 0, piece)).status(),
              absl::StatusCode::kInvalidArgument, "node");
  ExpectError(job_->pushes().Push(GradChunk(1, 0, 0, 0, piece)).status(),
              absl::StatusCode::kFailedPrecondition, "too far ahead");
  auto bad_len = GradChunk(0, 0, 0, 0, piece);
  bad_len.mutable_data()->resize(7);
  ExpectError(job_->pushes().Push(bad_len).status(), absl::StatusCode::kInvalidArgument, "length");
  auto bf16 = GradChunk(0, 0, 0, 0, piece);
  bf16.set_dtype(v1::DTYPE_BF16);
  ExpectError(job_->pushes().Push(bf16).status(), absl::StatusCode::kInvalidArgument, "dtype");
  const ShardProgress progress = job_->shard().Progress();
  EXPECT_EQ(progress.blocks_waiting, nb);
  EXPECT_EQ(progress.max_version, 0u);
  EXPECT_EQ(Weights(), before);
}

TEST_F(JobTest, StepsOutsideTheWindowAreRefused) {
  ExpectError(DoStep(1).status(), absl::StatusCode::kFailedPrecondition, "too far ahead");
  ExpectError(DoStep(0, absl::Milliseconds(50)).status(), absl::StatusCode::kDeadlineExceeded,
              "missing gradients from nodes [0, 1]");
  auto g = Grad(0, 0);
  PushAll(0, 0, g);
  ExpectError(DoStep(0, absl::Milliseconds(50)).status(), absl::StatusCode::kDeadlineExceeded,
              "nodes [1]");
  PushAll(1, 0, g);
  ASSERT_TRUE(DoStep(0).ok());
  PushAll(0, 1, g);
  PushAll(1, 1, g);
  ASSERT_TRUE(DoStep(1).ok());
  auto w2 = Weights(2);
  ExpectError(DoStep(0).status(), absl::StatusCode::kFailedPrecondition, "from the past");
  ExpectError(job_->step().Stats(0, absl::Now()).status(), absl::StatusCode::kFailedPrecondition,
              "from the past");
  v1::StepRequest bad_lr;
  bad_lr.set_step(2);
  bad_lr.set_lr(std::nanf(""));
  ExpectError(job_->step().Step(bad_lr, absl::Now(), pool_).status(),
              absl::StatusCode::kInvalidArgument, "lr");
  EXPECT_EQ(Weights(2), w2);
}

TEST_F(JobTest, GatherOfAVersionThatNeverComesTimesOut) {
  v1::GatherRequest req;
  req.set_dtype(v1::DTYPE_FP32);
  auto s = job_->gathers().Gather(*job_->gathers().CheckGather(req), 3, v1::DTYPE_FP32, 100,
                                  absl::Now() + absl::Milliseconds(50),
                                  [](const v1::Chunk&) { return true; });
  ExpectError(s, absl::StatusCode::kDeadlineExceeded, "version 3");
  req.set_dtype(v1::DTYPE_BF16);
  ExpectError(job_->gathers().CheckGather(req).status(), absl::StatusCode::kInvalidArgument,
              "dtype");
  req.set_dtype(v1::DTYPE_FP32);
  req.set_begin(0);
  req.set_end(job_->layout().total_elems + 1);
  ExpectError(job_->gathers().CheckGather(req).status(), absl::StatusCode::kInvalidArgument,
              "range");
}

TEST_F(JobTest, ShutdownWakesWaitersWithUnavailable) {
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    job_->shard().Shutdown();
  });
  ExpectError(DoStep(0, absl::Seconds(30)).status(), absl::StatusCode::kUnavailable,
              "shutting down");
  t.join();
}

// A gather waiting for a version that will never come (its coordinator's
// Step failed) ends when the job is deleted, not at its deadline: a
// rollback deletes the job to wake every rank still waiting on it
// (JobRegistry::Delete marks every copy it drops).
TEST_F(JobTest, DeletionWakesWaitersWithNotFound) {
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    job_->shard().MarkDeleted();
  });
  v1::GatherRequest req;
  req.set_dtype(v1::DTYPE_FP32);
  auto s = job_->gathers().Gather(*job_->gathers().CheckGather(req), 3, v1::DTYPE_FP32, 100,
                                  absl::Now() + absl::Seconds(300),
                                  [](const v1::Chunk&) { return true; });
  t.join();
  ExpectError(s, absl::StatusCode::kNotFound, "job job was deleted");
  // A gather that comes after the deletion (it held the job already) too.
  s = job_->gathers().Gather(*job_->gathers().CheckGather(req), 3, v1::DTYPE_FP32, 100,
                             absl::Now() + absl::Seconds(300),
                             [](const v1::Chunk&) { return true; });
  ExpectError(s, absl::StatusCode::kNotFound, "deleted");
}

// The token registry tests register "job" with.
constexpr char kToken[] = "job-test-token-0123456789abcdef0123456789";

TEST(JobRegistryTest, RegistrationIsIdempotentAndChecked) {
  JobRegistry registry(1 << 30);
  auto first = registry.Register(MakeRequest(), kToken);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  auto again = registry.Register(MakeRequest(), kToken);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->job, first->job);

  auto other = MakeRequest();
  other.mutable_spec()->mutable_tensors(0)->set_shape(1, 31);
  ExpectError(registry.Register(other, kToken).status(), absl::StatusCode::kAlreadyExists, "shape");
  auto other_shard = MakeRequest();
  other_shard.add_servers("b:2");
  ExpectError(registry.Register(other_shard, kToken).status(), absl::StatusCode::kAlreadyExists,
              "server list");
  auto malformed = MakeRequest();
  malformed.mutable_spec()->set_num_nodes(0);
  malformed.mutable_spec()->set_job_id("job2");
  ExpectError(registry.Register(malformed, kToken).status(), absl::StatusCode::kInvalidArgument,
              "num_nodes");
  auto bad_shard = MakeRequest();
  bad_shard.mutable_spec()->set_job_id("job3");
  bad_shard.set_shard_index(1);
  ExpectError(registry.Register(bad_shard, kToken).status(), absl::StatusCode::kInvalidArgument,
              "shard_index");
  ExpectError(registry.Get("nope").status(), absl::StatusCode::kNotFound, "nope");
  EXPECT_EQ(registry.size(), 1u);
  // The job answers to its token only.
  ExpectError(registry.Register(MakeRequest()).status(), absl::StatusCode::kUnauthenticated,
              "no job token");
  EXPECT_TRUE(registry.Authorize("job", kToken).ok());
}

TEST(JobRegistryTest, RamBudgetIsEnforcedBeforeAllocation) {
  auto req = MakeRequest();
  auto spec = *NormalizeJobSpec(req.spec());
  uint64_t need = Job::EstimateBytes(spec, LayoutOf(spec).num_blocks());
  JobRegistry registry(need - 1);
  ExpectError(registry.Register(req).status(), absl::StatusCode::kResourceExhausted, "RAM budget");
  EXPECT_EQ(registry.ram_used(), 0u);
  EXPECT_EQ(registry.size(), 0u);
  JobRegistry roomy(need);
  ASSERT_TRUE(roomy.Register(req, kToken).ok());
  EXPECT_EQ(roomy.ram_used(), need);
  EXPECT_TRUE(*roomy.Delete("job", kToken));
  EXPECT_EQ(roomy.ram_used(), 0u);
}

// The budget counts the state at its compact size: a budget that refuses
// the job with fp32 moments admits it with int8 moments, and the server
// holds what the tier keeps (master 4 B, moments 2 B and 16 B of scales
// per 2048 parameters, gradient sum 4 B, bf16 copy 2 B per parameter).
TEST(JobRegistryTest, RamBudgetCountsCompactMoments) {
  auto req = MakeRequest();
  req.mutable_spec()->set_moment_format(v1::MOMENTS_INT8);
  auto spec = *NormalizeJobSpec(req.spec());
  const uint64_t int8 = Job::EstimateBytes(spec, LayoutOf(spec).num_blocks());
  spec.set_moment_format(v1::MOMENTS_FP32);
  const uint64_t fp32 = Job::EstimateBytes(spec, LayoutOf(spec).num_blocks());
  EXPECT_LT(int8, fp32);
  JobRegistry registry(int8);
  auto wide = MakeRequest();
  ExpectError(registry.Register(wide, kToken).status(), absl::StatusCode::kResourceExhausted,
              "RAM budget");
  auto job = registry.Register(req, kToken);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(registry.ram_used(), int8);
  EXPECT_EQ((*job).job->shard().tier().ram_bytes(),
            LayoutOf(spec).num_blocks() * StateLayoutOf((*job).job->spec()).total_floats() * 4);
}

}  // namespace
}  // namespace zerostate::server
