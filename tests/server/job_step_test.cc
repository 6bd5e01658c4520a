// The speculative step (server/core/job_step.h) driven without a network:
// two jobs with the same spec, one plain and one speculative_step, take
// the same gradients; every case compares the speculative job's whole
// state (weights and moments, read as a checkpoint reads them) and its
// low-precision copy bit for bit with the plain job's. Bad Steps sent
// ahead leave the job as it was.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/job_spec.h"
#include "server/core/job.h"
#include "tests/server/gather_weights.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 256;
constexpr uint32_t kNodes = 2;

v1::JobSpec Spec(bool speculative, v1::MomentFormat format = v1::MOMENTS_FP32) {
  v1::JobSpec spec;
  spec.set_moment_format(format);
  spec.set_job_id(speculative ? "spec" : "plain");
  auto* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(40);
  w->add_shape(30);
  auto* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(50);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.mutable_optimizer()->set_weight_decay(0.01f);
  spec.set_num_nodes(kNodes);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_block_elems(kBlock);
  spec.set_seed(7);
  spec.set_speculative_step(speculative);
  return *NormalizeJobSpec(spec);
}

v1::StepRequest StepReq(uint64_t step, float lr, float grad_scale, bool ahead = false) {
  v1::StepRequest req;
  req.set_step(step);
  req.set_lr(lr);
  req.set_grad_scale(grad_scale);
  req.set_ahead(ahead);
  return req;
}

class JobStepTest : public ::testing::Test {
 protected:
  JobStepTest() : pool_(2) {
    plain_ = *Job::Create(Spec(false), {"a:1"}, 0);
    spec_ = *Job::Create(Spec(true), {"a:1"}, 0);
  }

  uint64_t blocks() const { return plain_->layout().num_blocks(); }

  std::vector<float> Grad(uint32_t node, uint64_t step) const {
    std::mt19937 rng(node * 1000 + step);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> g(plain_->layout().total_elems);
    for (const TensorSlot& t : plain_->layout().tensors) {
      for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) g[i] = d(rng);
    }
    return g;
  }

  // Both jobs anew, with moments stored in `format`.
  void UseMomentFormat(v1::MomentFormat format) {
    plain_ = *Job::Create(Spec(false, format), {"a:1"}, 0);
    spec_ = *Job::Create(Spec(true, format), {"a:1"}, 0);
  }

  static void Push(Job& job, uint32_t node, uint64_t step, uint64_t block,
                   const std::vector<float>& g) {
    v1::Chunk c;
    c.set_step(step);
    c.set_node(node);
    c.set_block(block);
    c.set_dtype(v1::DTYPE_FP32);
    c.set_data(std::string(reinterpret_cast<const char*>(g.data() + block * kBlock), kBlock * 4));
    auto r = job.pushes().Push(c);
    ASSERT_TRUE(r.ok()) << r.status();
  }

  // Both jobs get node `node`'s gradient of `step`, blocks in reverse order.
  void PushNode(uint32_t node, uint64_t step) {
    const auto g = Grad(node, step);
    for (uint64_t b = blocks(); b-- > 0;) {
      Push(*plain_, node, step, b, g);
      Push(*spec_, node, step, b, g);
    }
  }

  static uint64_t Speculated(const Job& job) { return job.shard().Progress().blocks_speculated; }

  // Until `n` blocks are stepped speculatively (the pool's tasks run them).
  void AwaitSpeculated(uint64_t n) {
    while (Speculated(*spec_) < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  absl::StatusOr<StepOutcome> DoStep(Job& job, const v1::StepRequest& req) {
    return job.step().Step(req, absl::Now() + absl::Seconds(10), pool_);
  }

  // The whole state (weights and moments) at `version`, as a checkpoint reads it.
  static std::vector<float> State(Job& job, uint64_t version) {
    auto guard = job.snapshots().BeginCheckpoint(version);
    EXPECT_TRUE(guard.ok()) << guard.status();
    const size_t floats = job.shard().tier_shape().block_floats();
    std::vector<float> out(floats * job.blocks().size());
    for (uint64_t b = 0; b < job.blocks().size(); ++b) {
      absl::Status s = job.snapshots().SnapshotBlock(b, version, absl::Now() + absl::Seconds(10),
                                                     out.data() + b * floats);
      EXPECT_TRUE(s.ok()) << s;
    }
    return out;
  }

  // The low-precision copy Gather serves at `version`.
  static std::vector<uint16_t> Lowp(Job& job, uint64_t version) {
    std::vector<uint16_t> out;
    v1::GatherRequest req;
    req.set_dtype(v1::DTYPE_BF16);
    absl::Status s =
        job.gathers().Gather(*job.gathers().CheckGather(req), version, v1::DTYPE_BF16, 1000,
                             absl::Now() + absl::Seconds(10), [&](const v1::Chunk& c) {
                               const auto* p = reinterpret_cast<const uint16_t*>(c.data().data());
                               out.insert(out.end(), p, p + c.data().size() / 2);
                               return true;
                             });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  void ExpectSameAt(uint64_t version) {
    EXPECT_EQ(plain_->shard().Progress().min_version, version);
    EXPECT_EQ(spec_->shard().Progress().min_version, version);
    const auto want = State(*plain_, version), got = State(*spec_, version);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "state at " << version;
    EXPECT_EQ(Lowp(*spec_, version), Lowp(*plain_, version)) << "bf16 copy at " << version;
  }

  ThreadPool pool_;
  std::unique_ptr<Job> plain_, spec_;
};

TEST_F(JobStepTest, ConfirmedSpeculationIsTheCommittedPlainStep) {
  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    ASSERT_TRUE(DoStep(*spec_, StepReq(step, 1e-2f, 0.5f, /*ahead=*/true)).ok());
    PushNode(step % 2 == 0 ? 1 : 0, step);  // node order varies
    PushNode(step % 2 == 0 ? 0 : 1, step);
    AwaitSpeculated(blocks());
    EXPECT_EQ(spec_->shard().Progress().min_version, step);  // nothing committed before the Step
    ASSERT_TRUE(DoStep(*plain_, StepReq(step, 1e-2f, 0.5f)).ok());
    auto out = DoStep(*spec_, StepReq(step, 1e-2f, 0.5f));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(out->already_applied);
    EXPECT_EQ(out->blocks_confirmed, blocks());
    EXPECT_EQ(out->blocks_redone, 0u);
    ExpectSameAt(step + 1);
  }
}

TEST_F(JobStepTest, ParametersSentAfterTheGradientsSpeculateTheCompleteBlocks) {
  PushNode(0, 0);
  PushNode(1, 0);
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, /*ahead=*/true)).ok());
  AwaitSpeculated(blocks());
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.5f)).ok());
  auto out = DoStep(*spec_, StepReq(0, 1e-2f, 0.5f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_confirmed, blocks());
  ExpectSameAt(1);
}

// Speculations queued while the pool is busy step the lowest block first,
// the one the next forward needs first, though it completed last: the
// pool's one thread is held while the blocks complete last to first, and
// a probe scheduled right after the first completion's task finds only
// block 0 stepped when it runs (in the order they completed it would be
// the last block). Then every block, bit for bit the plain step.
TEST_F(JobStepTest, QueuedSpeculationsStepTheLowestBlockFirst) {
  ASSERT_GE(blocks(), 3u);
  ThreadPool one(1);
  absl::Notification started, release;
  one.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  ASSERT_TRUE(spec_->step().Step(StepReq(0, 1e-2f, 0.5f, /*ahead=*/true),
                                 absl::Now() + absl::Seconds(10), one)
                  .ok());
  const auto g0 = Grad(0, 0), g1 = Grad(1, 0);
  for (uint64_t b = blocks(); b-- > 0;) Push(*spec_, 0, 0, b, g0);
  Push(*spec_, 1, 0, blocks() - 1, g1);  // the last block completes first
  std::vector<uint64_t> stepped_first;
  absl::Notification probed;
  one.Schedule([&] {
    for (uint64_t b = 0; b < blocks(); ++b) {
      Block& block = spec_->shard().local_block(b);
      absl::MutexLock lock(&block.mu);
      if (block.speculation() == Block::Speculation::kDone) stepped_first.push_back(b);
    }
    probed.Notify();
  });
  for (uint64_t b = blocks() - 1; b-- > 0;) Push(*spec_, 1, 0, b, g1);
  release.Notify();
  probed.WaitForNotification();
  EXPECT_EQ(stepped_first, std::vector<uint64_t>{0});
  AwaitSpeculated(blocks());
  for (uint32_t node : {0u, 1u}) {
    const auto g = Grad(node, 0);
    for (uint64_t b = 0; b < blocks(); ++b) Push(*plain_, node, 0, b, g);
  }
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.5f)).ok());
  auto out = DoStep(*spec_, StepReq(0, 1e-2f, 0.5f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_confirmed, blocks());
  ExpectSameAt(1);
}

// A speculation steps its block without the block's mutex, so a Step that
// comes while later blocks are still being speculated commits the earlier
// ones at once (their gathers of the next version go out) and waits for
// the running one alone. The test stands in for a speculation still
// stepping the last block (kRunning); block 0 reaches version 1 meanwhile.
// Then bit for bit the plain step.
TEST_F(JobStepTest, TheStepCommitsSpeculatedBlocksWhileALaterOneIsStillStepped) {
  ASSERT_GE(blocks(), 2u);
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, /*ahead=*/true)).ok());
  PushNode(0, 0);
  PushNode(1, 0);
  AwaitSpeculated(blocks());
  Block& last = spec_->shard().local_block(blocks() - 1);
  StepParams speculated;  // its state stays in next_state meanwhile
  {
    // Back to running through its transitions: dropped, queued, begun.
    absl::MutexLock lock(&last.mu);
    ASSERT_EQ(last.speculation(), Block::Speculation::kDone);
    speculated = last.spec_params();
    ASSERT_TRUE(last.DropSpeculation().ok());
    ASSERT_TRUE(last.QueueSpeculation().ok());
    ASSERT_TRUE(last.BeginSpeculation().ok());
  }
  auto stepped = std::async(std::launch::async, [&] { return DoStep(*spec_, StepReq(0, 1e-2f, 0.5f)); });
  Block& first = spec_->shard().local_block(0);
  bool committed = false;
  for (int i = 0; i < 20000 && !committed; ++i) {
    {
      absl::MutexLock lock(&first.mu);
      committed = first.version == 1;
    }
    if (!committed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    absl::MutexLock lock(&last.mu);
    EXPECT_EQ(last.version, 0u) << "the last block committed while its speculation ran";
    ASSERT_TRUE(last.FinishSpeculation(speculated).ok());  // the speculation ends
  }
  EXPECT_TRUE(committed) << "block 0 waited for the last block's speculation";
  auto out = stepped.get();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_confirmed, blocks());
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.5f)).ok());
  ExpectSameAt(1);
}

// GradStats reads the statistics each block published as its gradients
// completed, without the block's mutex: a speculation stepping a block
// holds that (here the test does), and GradStats answers meanwhile, with
// the plain job's numbers.
TEST_F(JobStepTest, GradStatsAnswerWhileABlockIsHeld) {
  PushNode(0, 0);
  PushNode(1, 0);
  auto want = plain_->step().Stats(0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(want.ok()) << want.status();
  Block& held = spec_->shard().local_block(blocks() - 1);
  held.mu.Lock();
  auto got = std::async(std::launch::async,
                        [&] { return spec_->step().Stats(0, absl::Now() + absl::Seconds(60)); });
  const bool answered = got.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  held.mu.Unlock();
  ASSERT_TRUE(answered) << "GradStats waited for the held block";
  auto stats = got.get();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->sum_squares, want->sum_squares);
  EXPECT_EQ(stats->nonfinite, want->nonfinite);
}

// A restore moves the version back: the statistics published before it
// are forgotten, and GradStats waits for the step's gradients again.
TEST_F(JobStepTest, ARestoreForgetsThePublishedStatistics) {
  PushNode(0, 0);
  PushNode(1, 0);
  auto before = spec_->step().Stats(0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(before.ok()) << before.status();
  const auto state = State(*spec_, 0);
  const size_t floats = spec_->shard().tier_shape().block_floats();
  for (uint64_t b = 0; b < blocks(); ++b) {
    ASSERT_TRUE(spec_->snapshots().RestoreBlock(b, state.data() + b * floats, 0).ok());
  }
  auto waiting = spec_->step().Stats(0, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kDeadlineExceeded) << waiting.status();
  EXPECT_NE(waiting.status().message().find("missing gradients"), std::string::npos)
      << waiting.status();
  PushNode(0, 0);
  PushNode(1, 0);
  auto again = spec_->step().Stats(0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->sum_squares, before->sum_squares);
}

TEST_F(JobStepTest, ClippingRedoesEveryBlockFromTheStateTheSpeculationLeftAlone) {
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, true)).ok());
  PushNode(1, 0);
  PushNode(0, 0);
  AwaitSpeculated(blocks());
  // The global norm said clip: the Step carries a smaller grad_scale.
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.125f)).ok());
  auto out = DoStep(*spec_, StepReq(0, 1e-2f, 0.125f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_confirmed, 0u);
  EXPECT_EQ(out->blocks_redone, blocks());
  ExpectSameAt(1);
}

TEST_F(JobStepTest, ASkipDropsTheSpeculationAndKeepsTheCountOfAppliedSteps) {
  // Step 0 applied, step 1 skipped (an overflow), step 2 applied with t = 2.
  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    ASSERT_TRUE(DoStep(*spec_, StepReq(step, 1e-2f, 0.5f, true)).ok());
    PushNode(0, step);
    PushNode(1, step);
    AwaitSpeculated(blocks());
    v1::StepRequest req = StepReq(step, 1e-2f, 0.5f);
    req.set_skip(step == 1);
    ASSERT_TRUE(DoStep(*plain_, req).ok());
    auto out = DoStep(*spec_, req);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->blocks_redone, step == 1 ? blocks() : 0u);
    ExpectSameAt(step + 1);
  }
  EXPECT_EQ(spec_->step().applied_steps().Before(3), 2u);
}

// With int8 moments: the speculated step is the plain one bit for bit, and
// a step whose gradients hold an Inf and a NaN is seen by GradStats and
// skipped on the coordinator's word as with fp32 moments (the state, codes
// and scales included, stays as it was).
TEST_F(JobStepTest, Int8MomentsSpeculateAndSkipAsThePlainStep) {
  UseMomentFormat(v1::MOMENTS_INT8);
  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    ASSERT_TRUE(DoStep(*spec_, StepReq(step, 1e-2f, 0.5f, true)).ok());
    auto g = Grad(0, step);
    if (step == 1) {
      g[3] = INFINITY;
      g[kBlock + 5] = NAN;
    }
    for (uint64_t b = 0; b < blocks(); ++b) {
      Push(*plain_, 0, step, b, g);
      Push(*spec_, 0, step, b, g);
    }
    PushNode(1, step);
    AwaitSpeculated(blocks());
    auto stats = plain_->step().Stats(step, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->nonfinite, step == 1 ? 2u : 0u);
    v1::StepRequest req = StepReq(step, 1e-2f, 0.5f);
    req.set_skip(stats->nonfinite > 0);
    const std::vector<float> before = State(*plain_, step);
    ASSERT_TRUE(DoStep(*plain_, req).ok());
    ASSERT_TRUE(DoStep(*spec_, req).ok());
    ExpectSameAt(step + 1);
    const std::vector<float> after = State(*plain_, step + 1);
    EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * 4) == 0, step == 1);
  }
}

TEST_F(JobStepTest, ACancelledStepLeavesTheSpeculationForItsRetry) {
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, true)).ok());
  PushNode(0, 0);
  PushNode(1, 0);
  AwaitSpeculated(blocks());
  auto cancelled = spec_->step().Step(StepReq(0, 1e-2f, 0.5f), absl::Now() + absl::Seconds(10),
                                      pool_, [] { return true; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled) << cancelled.status();
  EXPECT_EQ(spec_->shard().Progress().min_version, 0u);
  EXPECT_EQ(Speculated(*spec_), blocks());
  // A Step past its deadline as it decides: not applied either.
  auto late = spec_->step().Step(StepReq(0, 1e-2f, 0.5f), absl::Now() - absl::Seconds(1), pool_);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_EQ(spec_->shard().Progress().min_version, 0u);
  // The coordinator's retry, and a retry of that after its answer was lost.
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.5f)).ok());
  auto out = DoStep(*spec_, StepReq(0, 1e-2f, 0.5f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_confirmed, blocks());
  auto again = DoStep(*spec_, StepReq(0, 1e-2f, 0.5f));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_applied);
  auto ahead_again = DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, true));
  ASSERT_TRUE(ahead_again.ok()) << ahead_again.status();
  EXPECT_TRUE(ahead_again->already_applied);
  ExpectSameAt(1);
}

TEST_F(JobStepTest, RepeatedPushesAndNewParametersAheadAreHarmless) {
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, true)).ok());
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f, true)).ok());  // a retry
  PushNode(0, 0);
  const auto g1 = Grad(1, 0);
  for (uint64_t b = 0; b < blocks() / 2; ++b) Push(*spec_, 1, 0, b, g1);
  AwaitSpeculated(blocks() / 2);
  // New parameters ahead: the blocks not yet stepped take them; the first
  // half is redone at the Step, whose parameters these are.
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 2e-2f, 0.5f, true)).ok());
  for (uint64_t b = 0; b < blocks(); ++b) Push(*spec_, 1, 0, b, g1);  // repeats are duplicates
  PushNode(1, 0);  // all of node 1 again on the speculative job, first time on the plain one
  AwaitSpeculated(blocks());
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 2e-2f, 0.5f)).ok());
  auto out = DoStep(*spec_, StepReq(0, 2e-2f, 0.5f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_redone, blocks() / 2);
  EXPECT_EQ(out->blocks_confirmed, blocks() - blocks() / 2);
  ExpectSameAt(1);
}

TEST_F(JobStepTest, GathersAndCheckpointsNeverSeeASpeculatedState) {
  PushNode(0, 0);
  PushNode(1, 0);
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.5f)).ok());
  ASSERT_TRUE(DoStep(*spec_, StepReq(0, 1e-2f, 0.5f)).ok());  // a plain step on this job too
  ASSERT_TRUE(DoStep(*spec_, StepReq(1, 1e-2f, 0.5f, true)).ok());
  PushNode(0, 1);
  PushNode(1, 1);
  AwaitSpeculated(blocks());
  const std::vector<float> want = State(*plain_, 1);
  // A gather of version 1 is served from the state the speculation left
  // alone, the plain job's at version 1, while the speculated state waits.
  EXPECT_EQ(GatherWeights(*spec_, 1), GatherWeights(*plain_, 1));
  EXPECT_EQ(spec_->shard().Progress().min_version, 1u);
  EXPECT_EQ(Speculated(*spec_), blocks());
  // Version 2 waits for the Step.
  v1::GatherRequest req;
  req.set_dtype(v1::DTYPE_FP32);
  absl::Status gathered = spec_->gathers().Gather(
      *spec_->gathers().CheckGather(req), 2, v1::DTYPE_FP32, 1000,
      absl::Now() + absl::Milliseconds(50), [](const v1::Chunk&) { return true; });
  EXPECT_EQ(gathered.code(), absl::StatusCode::kDeadlineExceeded) << gathered;
  // A checkpoint of version 1 begun now reads version 1's state, during
  // and after the Step.
  auto guard = spec_->snapshots().BeginCheckpoint(1);
  ASSERT_TRUE(guard.ok()) << guard.status();
  const size_t floats = spec_->shard().tier_shape().block_floats();
  std::vector<float> got(floats * blocks());
  ASSERT_TRUE(
      spec_->snapshots().SnapshotBlock(0, 1, absl::Now() + absl::Seconds(5), got.data()).ok());
  ASSERT_TRUE(DoStep(*plain_, StepReq(1, 1e-2f, 0.25f)).ok());
  // Clipped: every block redone, its state at 1 kept for the checkpoint.
  auto out = DoStep(*spec_, StepReq(1, 1e-2f, 0.25f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_redone, blocks());
  for (uint64_t b = 1; b < blocks(); ++b) {
    ASSERT_TRUE(spec_->snapshots()
                    .SnapshotBlock(b, 1, absl::Now() + absl::Seconds(5), got.data() + b * floats)
                    .ok());
  }
  guard->reset();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  ExpectSameAt(2);
}

TEST_F(JobStepTest, ABadStepAheadIsRefusedAndChangesNothing) {
  PushNode(0, 0);
  PushNode(1, 0);
  auto expect = [&](Job& job, const v1::StepRequest& req, absl::StatusCode code,
                    const std::string& words) {
    auto out = DoStep(job, req);
    EXPECT_EQ(out.status().code(), code) << out.status();
    EXPECT_NE(out.status().message().find(words), std::string::npos) << out.status();
  };
  expect(*plain_, StepReq(0, 1e-2f, 0.5f, true), absl::StatusCode::kFailedPrecondition,
         "without speculative_step");
  v1::StepRequest skip = StepReq(0, 1e-2f, 0.5f, true);
  skip.set_skip(true);
  expect(*spec_, skip, absl::StatusCode::kInvalidArgument, "skip");
  v1::StepRequest state = StepReq(0, 1e-2f, 0.5f, true);
  state.set_trainer_state("scaler");
  expect(*spec_, state, absl::StatusCode::kInvalidArgument, "trainer_state");
  expect(*spec_, StepReq(0, std::nanf(""), 0.5f, true), absl::StatusCode::kInvalidArgument, "lr");
  expect(*spec_, StepReq(0, 1e-2f, -1, true), absl::StatusCode::kInvalidArgument, "grad_scale");
  expect(*spec_, StepReq(1, 1e-2f, 0.5f, true), absl::StatusCode::kFailedPrecondition,
         "too far ahead");
  EXPECT_EQ(Speculated(*spec_), 0u);
  // None of them left parameters behind: the Step is a plain one.
  ASSERT_TRUE(DoStep(*plain_, StepReq(0, 1e-2f, 0.5f)).ok());
  auto out = DoStep(*spec_, StepReq(0, 1e-2f, 0.5f));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->blocks_confirmed + out->blocks_redone, 0u);
  ExpectSameAt(1);
}

TEST_F(JobStepTest, SpeculativeStepNeedsTheRamTier) {
  v1::JobSpec spec = Spec(true);
  spec.set_tier(v1::TIER_NVME);
  auto normalized = NormalizeJobSpec(spec);
  EXPECT_EQ(normalized.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(normalized.status().message().find("speculative_step"), std::string::npos);
  // Its memory is charged: a second copy of the state and of the bf16 copy.
  const uint64_t elems = blocks() * kBlock;
  EXPECT_EQ(Job::EstimateBytes(Spec(true), blocks()) - Job::EstimateBytes(Spec(false), blocks()),
            elems * (3 * 4 + 2) + 3 * (Spec(true).ByteSizeLong() - Spec(false).ByteSizeLong()));
}

}  // namespace
}  // namespace zerostate::server
