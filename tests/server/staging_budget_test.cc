// The gradient staging budget (server/core/staging_budget.h) with real jobs and
// accumulators: early nodes take staging buffers from it, a push that
// finds it spent waits (without a block's mutex) and is served once memory
// comes free or its node's turn comes, times out changing nothing, and the
// bytes come back on fold, Reset and job deletion. Waiting threads are
// observed through StagingBudget::waiters(), never through timing.
#include "server/core/staging_budget.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "server/core/gradient_accumulator.h"
#include "server/core/job.h"
#include "server/core/job_registry.h"
#include "server/state_server.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 256;
constexpr uint64_t kBuffer = kBlock * sizeof(float);  // one staging buffer
constexpr uint32_t kNodes = 3;
constexpr char kToken[] = "staging-test-token-0123456789abcdef0123456789";

// 620 parameters: blocks 0, 1 and 2.
v1::RegisterJobRequest MakeRequest() {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("job");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(20);
  w->add_shape(31);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->set_num_nodes(kNodes);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_FP32);
  spec->set_block_elems(kBlock);
  spec->set_seed(5);
  req.add_servers("a:1");
  req.set_shard_index(0);
  return req;
}

std::vector<float> Grad(uint32_t node, uint64_t block) {
  std::mt19937 rng(node * 1000 + block);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> g(kBlock);
  for (float& x : g) x = d(rng);
  return g;
}

v1::Chunk GradChunk(uint32_t node, uint64_t block) {
  std::vector<float> g = Grad(node, block);
  v1::Chunk c;
  c.set_job_id("job");
  c.set_step(0);
  c.set_node(node);
  c.set_block(block);
  c.set_dtype(v1::DTYPE_FP32);
  c.set_data(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  return c;
}

// A job on a registry whose staging budget is `budget_bytes`.
class StagingJob {
 public:
  explicit StagingJob(uint64_t budget_bytes)
      : staging_(std::make_shared<StagingBudget>(budget_bytes)),
        registry_(1 << 30, TierOptions(), JobQuotas(), staging_),
        pool_(1) {
    auto reg = registry_.Register(MakeRequest(), kToken);
    EXPECT_TRUE(reg.ok()) << reg.status();
    job_ = reg->job;
  }

  absl::StatusOr<PushOutcome> Push(uint32_t node, uint64_t block,
                                   absl::Time deadline = absl::InfinitePast()) {
    return job_->pushes().Push(GradChunk(node, block), deadline);
  }
  void PushOk(uint32_t node, uint64_t block) {
    auto r = Push(node, block);
    ASSERT_TRUE(r.ok()) << "node " << node << " block " << block << ": " << r.status();
    EXPECT_EQ(*r, PushOutcome::kApplied) << "node " << node << " block " << block;
  }
  // Steps step 0 and returns the weights.
  std::vector<float> StepAndGather() {
    v1::StepRequest req;
    req.set_job_id("job");
    req.set_lr(0.01f);
    auto out = job_->step().Step(req, absl::Now() + absl::Seconds(30), pool_);
    EXPECT_TRUE(out.ok()) << out.status();
    std::vector<float> w;
    v1::GatherRequest g;
    g.set_dtype(v1::DTYPE_FP32);
    EXPECT_TRUE(job_->gathers()
                    .Gather(*job_->gathers().CheckGather(g), 1, v1::DTYPE_FP32, 1 << 20,
                            absl::Now() + absl::Seconds(30),
                            [&](const v1::Chunk& c) {
                              const float* f = reinterpret_cast<const float*>(c.data().data());
                              w.insert(w.end(), f, f + c.data().size() / 4);
                              return true;
                            })
                    .ok());
    return w;
  }
  // Waits (no time limit: the test's own timeout is the backstop) until
  // `n` pushes wait for staging memory.
  void AwaitWaiters(int n) const {
    while (staging_->waiters() != n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::shared_ptr<StagingBudget> staging_;
  JobRegistry registry_;
  ThreadPool pool_;
  std::shared_ptr<Job> job_;
};

// Every node's every block pushed in node order, with no budget at all.
std::vector<float> ReferenceWeights() {
  StagingJob ref(0);
  for (uint64_t b = 0; b < 3; ++b) {
    for (uint32_t n = 0; n < kNodes; ++n) ref.PushOk(n, b);
  }
  EXPECT_EQ(ref.staging_->used(), 0u);
  return ref.StepAndGather();
}

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
}

TEST(StagingBudgetTest, SecondEarlyNodeWaitsAndIsServedWhenTheFirstIsFolded) {
  StagingJob s(kBuffer);  // room for exactly one staging buffer
  s.PushOk(2, 0);         // early at block 0: takes the whole budget
  EXPECT_EQ(s.staging_->used(), kBuffer);

  // Node 1 is early at block 1 too, and finds the budget spent: it waits.
  absl::StatusOr<PushOutcome> waited;
  std::thread early([&] { waited = s.Push(1, 1, absl::Now() + absl::Seconds(60)); });
  s.AwaitWaiters(1);
  // Block 0 completes (nodes 0 and 1 in turn): node 2's staging is folded
  // and given back, and the waiting push takes it.
  s.PushOk(0, 0);
  s.PushOk(1, 0);
  early.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(*waited, PushOutcome::kApplied);
  EXPECT_EQ(s.staging_->used(), kBuffer);  // now node 1's at block 1

  s.PushOk(0, 1);  // folds node 1's staging: the budget is free again
  EXPECT_EQ(s.staging_->used(), 0u);
  s.PushOk(2, 1);
  for (uint32_t n = 0; n < kNodes; ++n) s.PushOk(n, 2);
  ExpectSameBits(s.StepAndGather(), ReferenceWeights());
}

TEST(StagingBudgetTest, WaitingPushOfANodeThatBecomesTheHeadGoesStraightIn) {
  StagingJob s(kBuffer);
  s.PushOk(2, 1);  // the only buffer, at another block
  absl::StatusOr<PushOutcome> waited;
  std::thread early([&] { waited = s.Push(1, 0, absl::Now() + absl::Seconds(60)); });
  s.AwaitWaiters(1);
  s.PushOk(0, 0);  // node 1 is block 0's head now: it needs no staging
  early.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(*waited, PushOutcome::kApplied);
  EXPECT_EQ(s.staging_->used(), kBuffer);  // still only node 2's at block 1
}

// The head node's pieces never need staging: with no budget at all every
// early piece is refused, and in-order pushes still complete the step.
TEST(StagingBudgetTest, HeadNodeNeedsNoStagingSoAZeroBudgetStillSteps) {
  StagingJob s(0);
  auto early = s.Push(1, 0);
  ASSERT_FALSE(early.ok());
  EXPECT_TRUE(absl::IsUnavailable(early.status())) << early.status();
  EXPECT_TRUE(JobPushes::IsStagingWait(early.status()));
  for (uint64_t b = 0; b < 3; ++b) {
    for (uint32_t n = 0; n < kNodes; ++n) s.PushOk(n, b);
  }
  EXPECT_EQ(s.staging_->used(), 0u);
  ExpectSameBits(s.StepAndGather(), ReferenceWeights());
}

TEST(StagingBudgetTest, EarlyPushThatTimesOutChangesNothingAndItsRetrySucceeds) {
  StagingJob s(kBuffer);
  s.PushOk(2, 0);
  // The deadline is already past: the push gives up at its first wait.
  auto timed_out = s.Push(1, 1, absl::Now());
  ASSERT_FALSE(timed_out.ok());
  EXPECT_TRUE(absl::IsUnavailable(timed_out.status())) << timed_out.status();
  EXPECT_TRUE(JobPushes::IsStagingWait(timed_out.status()));
  const std::string message(timed_out.status().message());
  EXPECT_NE(message.find("staging budget of 1024 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("has 1024 in use"), std::string::npos) << message;
  EXPECT_NE(message.find("--staging_budget_bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("node 1"), std::string::npos) << message;
  EXPECT_EQ(s.staging_->used(), kBuffer);
  EXPECT_EQ(s.staging_->waiters(), 0);

  s.PushOk(0, 0);
  s.PushOk(1, 0);  // folds node 2's staging
  EXPECT_EQ(s.staging_->used(), 0u);
  s.PushOk(1, 1);  // the retry: applied, so the refused attempt recorded nothing
  s.PushOk(0, 1);
  s.PushOk(2, 1);
  for (uint32_t n = 0; n < kNodes; ++n) s.PushOk(n, 2);
  ExpectSameBits(s.StepAndGather(), ReferenceWeights());
}

// The data plane waits before it reads a payload (JobPushes::AwaitStagingRoom):
// the wait ends once the push would find room, and is no wait at all for
// the head node or a retry.
TEST(StagingBudgetTest, AwaitStagingRoomEndsWhenAPushWouldFindRoom) {
  StagingJob s(kBuffer);
  s.PushOk(2, 0);
  ChunkFields early;
  early.job_id = "job";
  early.node = 1;
  early.block = 1;
  early.dtype = v1::DTYPE_FP32;
  ChunkFields head = early;
  head.node = 0;
  s.job_->pushes().AwaitStagingRoom(head, kBuffer, absl::InfiniteFuture());  // returns at once
  ChunkFields retry = early;
  retry.node = 2;
  retry.block = 0;
  s.job_->pushes().AwaitStagingRoom(retry, kBuffer, absl::InfiniteFuture());  // returns at once
  EXPECT_EQ(s.staging_->waiters(), 0);

  std::thread waiter(
      [&] { s.job_->pushes().AwaitStagingRoom(early, kBuffer, absl::Now() + absl::Seconds(60)); });
  s.AwaitWaiters(1);
  s.PushOk(0, 0);
  s.PushOk(1, 0);  // folds node 2's staging at block 0
  waiter.join();
  EXPECT_EQ(s.staging_->used(), 0u);
  s.PushOk(1, 1);  // finds the room it waited for, without waiting
}

TEST(StagingBudgetTest, AccumulatorGivesStagingBackOnResetAndDestruction) {
  StagingBudget budget(2 * kBuffer);
  std::vector<float> g = Grad(1, 0);
  {
    GradientAccumulator acc(kNodes, kBlock, kBlock, &budget);
    ASSERT_EQ(*acc.Add(1, 0, kBlock, g.data(), v1::DTYPE_FP32),
              GradientAccumulator::Outcome::kApplied);
    ASSERT_EQ(*acc.Add(2, 0, 10, g.data(), v1::DTYPE_FP32),
              GradientAccumulator::Outcome::kApplied);
    EXPECT_EQ(budget.used(), 2 * kBuffer);
    // A third early node finds the budget spent: nothing changes.
    GradientAccumulator other(kNodes, kBlock, kBlock, &budget);
    EXPECT_EQ(*other.Add(1, 0, 10, g.data(), v1::DTYPE_FP32),
              GradientAccumulator::Outcome::kNoStaging);
    EXPECT_EQ(other.MissingNodes(), (std::vector<uint32_t>{0, 1, 2}));
    acc.Reset();
    EXPECT_EQ(budget.used(), 0u);
    ASSERT_EQ(*acc.Add(2, 0, 10, g.data(), v1::DTYPE_FP32),
              GradientAccumulator::Outcome::kApplied);
    EXPECT_EQ(budget.used(), kBuffer);
  }
  EXPECT_EQ(budget.used(), 0u);  // destroyed with a buffer
}

// The pool: a buffer given back is the next one taken, the same memory,
// counted idle in between and never as in use.
TEST(StagingBudgetTest, GivenBackBufferIsTakenAgainWithoutANewOne) {
  StagingBudget budget(2 * kBuffer);
  std::optional<AlignedBuffer<float>> first = budget.TryTake(kBlock);
  ASSERT_TRUE(first.has_value());
  const float* memory = first->data();
  budget.Give(*std::move(first));
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(budget.idle(), kBuffer);
  std::optional<AlignedBuffer<float>> again = budget.TryTake(kBlock);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->data(), memory);
  EXPECT_EQ(again->size(), kBlock);
  EXPECT_EQ(budget.used(), kBuffer);
  EXPECT_EQ(budget.idle(), 0u);
  budget.Give(*std::move(again));
}

// Idle buffers and those in use together stay within the budget (idle ones
// of another size are freed for a new one), and once a period of staging
// ends, no more stay idle than it had in use at once.
TEST(StagingBudgetTest, IdleBuffersStayWithinTheBudgetAndWhatTheLastPeriodUsed) {
  StagingBudget budget(3 * kBuffer);
  std::vector<AlignedBuffer<float>> taken;
  for (int i = 0; i < 3; ++i) taken.push_back(*budget.TryTake(kBlock));
  EXPECT_FALSE(budget.TryTake(kBlock).has_value());  // spent: nothing taken
  EXPECT_EQ(budget.used(), 3 * kBuffer);
  for (auto& b : taken) budget.Give(std::move(b));
  taken.clear();
  EXPECT_EQ(budget.idle(), 3 * kBuffer);  // the period used three at once

  // A buffer of twice the size: two idle ones go so that the memory held
  // stays within the budget.
  std::optional<AlignedBuffer<float>> wide = budget.TryTake(2 * kBlock);
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(budget.used(), 2 * kBuffer);
  EXPECT_EQ(budget.idle(), kBuffer);
  budget.Give(*std::move(wide));
  // That period used one wide buffer at once: one wide buffer's bytes stay
  // (the oldest idle ones go first: the narrow one).
  EXPECT_EQ(budget.idle(), 2 * kBuffer);

  std::optional<AlignedBuffer<float>> one = budget.TryTake(kBlock);  // new: the wide one fits
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(budget.idle(), 2 * kBuffer);
  budget.Give(*std::move(one));
  EXPECT_EQ(budget.idle(), kBuffer);  // the last period's one buffer
}

// A staged node's buffer comes back with the previous step's numbers in it
// (and only part of it written this time): the sum is still the in-order
// one, bit for bit.
TEST(StagingBudgetTest, ReusedStagingBufferSumsBitIdentically) {
  StagingBudget budget(2 * kBuffer);
  GradientAccumulator acc(kNodes, kBlock, kBlock, &budget);
  auto add = [&](GradientAccumulator& a, uint32_t node, uint32_t offset, uint32_t count,
                 const std::vector<float>& g) {
    auto r = a.Add(node, offset, count, g.data() + offset, v1::DTYPE_FP32);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(*r, GradientAccumulator::Outcome::kApplied) << "node " << node;
  };
  // Step A: nodes 2 and 1 early, whole blocks.
  for (uint32_t n : {2u, 1u, 0u}) add(acc, n, 0, kBlock, Grad(n, 0));
  ASSERT_TRUE(acc.complete());
  acc.Reset();
  EXPECT_EQ(budget.idle(), 2 * kBuffer);
  // Step B: other numbers, node 2's in two pieces, into the reused buffers.
  std::vector<std::vector<float>> g;
  for (uint32_t n = 0; n < kNodes; ++n) g.push_back(Grad(n + 10, 7));
  add(acc, 2, 100, kBlock - 100, g[2]);
  add(acc, 1, 0, kBlock, g[1]);
  EXPECT_EQ(budget.idle(), 0u);  // both reused
  add(acc, 2, 0, 100, g[2]);
  add(acc, 0, 0, kBlock, g[0]);
  ASSERT_TRUE(acc.complete());

  GradientAccumulator in_order(kNodes, kBlock, kBlock);  // no staging at all
  for (uint32_t n = 0; n < kNodes; ++n) add(in_order, n, 0, kBlock, g[n]);
  EXPECT_EQ(std::memcmp(acc.sum(), in_order.sum(), kBuffer), 0);
  EXPECT_EQ(budget.used(), 0u);
}

TEST(StagingBudgetTest, DeletedJobGivesItsStagingBackWhileCallsStillHoldIt) {
  StagingJob s(kBuffer);
  s.PushOk(2, 0);
  EXPECT_EQ(s.staging_->used(), kBuffer);
  std::shared_ptr<Job> held = s.job_;  // as an in-flight call would
  s.job_.reset();
  auto deleted = s.registry_.Delete("job", kToken);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(*deleted);
  EXPECT_EQ(s.staging_->used(), 0u);
  EXPECT_EQ(held.use_count(), 1);
}

TEST(StagingBudgetTest, ShutdownWakesAPushWaitingForStaging) {
  StagingJob s(kBuffer);
  s.PushOk(2, 0);
  absl::StatusOr<PushOutcome> waited;
  std::thread early([&] { waited = s.Push(1, 1, absl::InfiniteFuture()); });
  s.AwaitWaiters(1);
  s.registry_.Shutdown();
  early.join();
  ASSERT_FALSE(waited.ok());
  EXPECT_TRUE(absl::IsUnavailable(waited.status())) << waited.status();
  EXPECT_EQ(s.staging_->used(), kBuffer);
}

TEST(StagingBudgetTest, ServerRefusesAStagingBudgetOverItsRamBudget) {
  ServerOptions opt;
  opt.listen = "127.0.0.1:0";
  opt.metrics_listen = "";
  opt.tls.plaintext = true;
  opt.data_listen = "off";
  opt.ram_budget_bytes = 1 << 20;
  opt.staging_budget_bytes = (1 << 20) + 1;
  auto server = StateServer::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
  EXPECT_NE(server.status().message().find("staging_budget_bytes: 1048577"), std::string::npos)
      << server.status();
  EXPECT_NE(server.status().message().find("--ram_budget_bytes"), std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace zerostate::server
