// A backup's held steps (server/core/held_steps.h) on real jobs, without a
// network: held once, acknowledged again when resent, refused out of
// order or malformed with nothing changed, at most `max_held` behind, and
// applied in order to the same bits as the steps applied at once.
#include "server/core/held_steps.h"

#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/core/aligned_buffer.h"
#include "server/core/job.h"

namespace zerostate::server {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_job_id("held");
  auto* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(20);
  w->add_shape(30);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_FP32);
  spec.set_block_elems(256);
  spec.set_seed(5);
  return *NormalizeJobSpec(spec);
}

std::unique_ptr<Job> NewJob() {
  auto job = Job::Create(Spec(), {"a:1"}, 0);
  EXPECT_TRUE(job.ok()) << job.status();
  return *std::move(job);
}

v1::StepRequest Req(uint64_t step) {
  v1::StepRequest req;
  req.set_job_id("held");
  req.set_step(step);
  req.set_lr(1e-2f);
  req.set_grad_scale(1.0f);
  return req;
}

// Every block's summed gradient of `step`.
JobPushes::ReplicatedGrads Grads(Job& job, uint64_t step) {
  JobPushes::ReplicatedGrads grads;
  for (const auto& bp : job.shard().all_blocks()) {
    std::vector<float> g(bp->required);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 1e-3f * static_cast<float>((i * 7 + step) % 13);
    grads.emplace_back(bp->index, std::string(reinterpret_cast<const char*>(g.data()),
                                              g.size() * sizeof(float)));
  }
  return grads;
}

uint64_t VersionOf(Job& job) {
  Block& b = job.shard().local_block(0);
  absl::MutexLock lock(&b.mu);
  return b.version;
}

// Every block's state, end to end, at `version`.
std::string StateOf(Job& job, uint64_t version) {
  std::string all;
  AlignedBuffer<float> state(job.shard().tier_shape().block_floats());
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    uint64_t at = 0;
    EXPECT_TRUE(job.gathers()
                    .ReadBlock(local, version, absl::Now() + absl::Seconds(10), state.data(), &at)
                    .ok());
    EXPECT_EQ(at, version);
    all.append(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
  }
  return all;
}

TEST(HeldStepsTest, StepsAreHeldInOrderBoundedAndAppliedToTheSameBits) {
  ThreadPool pool(2);
  auto reference = NewJob();
  auto copy = NewJob();
  for (uint64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE(reference->pushes().ApplyReplicatedStep(Req(step), Grads(*reference, step), pool).ok());
  }
  HeldSteps& held = copy->held();
  constexpr size_t kMax = 2;
  auto hold = [&](uint64_t step) { return held.Hold(Req(step), Grads(*copy, step), pool, kMax); };
  auto h0 = hold(0);
  ASSERT_TRUE(h0.ok() && *h0) << h0.status();
  auto again = hold(0);  // a primary's retry: acknowledged, not held twice
  ASSERT_TRUE(again.ok() && !*again) << again.status();
  EXPECT_EQ(held.count(), 1u);
  auto ahead = hold(2);
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kFailedPrecondition) << ahead.status();
  EXPECT_NE(ahead.status().message().find("needs a catch-up"), std::string::npos);
  EXPECT_EQ(held.count(), 1u);
  auto h1 = hold(1);
  ASSERT_TRUE(h1.ok() && *h1) << h1.status();
  EXPECT_EQ(VersionOf(*copy), 0u) << "nothing applies below the bound";
  // Malformed: a block's sum missing. Refused, nothing applied or held.
  JobPushes::ReplicatedGrads partial = Grads(*copy, 2);
  partial.pop_back();
  auto bad = held.Hold(Req(2), std::move(partial), pool, /*max_held=*/3);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_EQ(held.count(), 2u);
  EXPECT_EQ(VersionOf(*copy), 0u);
  // At the bound the oldest applies first, on the caller's thread.
  auto h2 = hold(2);
  ASSERT_TRUE(h2.ok() && *h2) << h2.status();
  EXPECT_EQ(VersionOf(*copy), 1u);
  EXPECT_EQ(held.count(), 2u);
  auto h3 = hold(3);
  ASSERT_TRUE(h3.ok() && *h3) << h3.status();
  EXPECT_EQ(VersionOf(*copy), 2u);
  auto past = hold(0);  // applied long ago: the copy is past it
  EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition) << past.status();
  // Replayed (a failover, a read): every held step, in order, bit for bit.
  ASSERT_TRUE(held.ApplyAll().ok());
  EXPECT_EQ(held.count(), 0u);
  EXPECT_EQ(VersionOf(*copy), 4u);
  EXPECT_EQ(StateOf(*copy, 4), StateOf(*reference, 4));
  // A catch-up's seed drops what is held; the copy stays where it was.
  auto h4 = hold(4);
  ASSERT_TRUE(h4.ok() && *h4) << h4.status();
  held.Drop();
  EXPECT_EQ(held.count(), 0u);
  EXPECT_EQ(VersionOf(*copy), 4u);
}

}  // namespace
}  // namespace zerostate::server
