// The memory a backup receives its primary's sums into
// (server/replication/kept_sums.h, KeptSums as SumBuffers): a step's sums,
// once applied and recycled, are what the next sums of their size are
// received into (the same memory, not fresh pages), up to the bound on
// idle bytes; a sum of another size gets a new buffer. The idle ones live
// in the RAM budget's room the jobs leave (JobRegistry lends it), and a job
// that needs that room gets it.
#include "server/replication/kept_sums.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "server/core/job_registry.h"

namespace zerostate::server {
namespace {

constexpr char kToken[] = "kept-sums-test-token-0123456789abcdef012345";

v1::RegisterJobRequest JobOf(const std::string& id, uint64_t params) {
  v1::RegisterJobRequest req;
  req.mutable_spec()->set_job_id(id);
  auto* w = req.mutable_spec()->add_tensors();
  w->set_name("w");
  w->add_shape(params);
  req.mutable_spec()->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  req.mutable_spec()->set_num_nodes(1);
  req.mutable_spec()->set_grad_dtype(v1::DTYPE_FP32);
  req.mutable_spec()->set_weight_dtype(v1::DTYPE_FP32);
  req.mutable_spec()->set_block_elems(1024);
  req.add_servers("a:1");
  return req;
}

uint64_t BytesOf(const v1::RegisterJobRequest& req) {
  v1::JobSpec spec = *NormalizeJobSpec(req.spec());
  return Job::EstimateBytes(spec, LayoutOf(spec).num_blocks());
}

// A gauge's value on `registry`'s page.
double Gauge(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name == name) return family.metric.at(0).gauge.value;
  }
  ADD_FAILURE() << name << " is not on the metrics page";
  return -1;
}

KeptSums::Sums SumsOf(int count, uint64_t bytes) {
  KeptSums::Sums sums;
  for (int i = 0; i < count; ++i) sums.emplace_back(i, std::string(bytes, 's'));
  return sums;
}

TEST(KeptSumsTest, RecycledSumsLiveInTheRoomTheJobsLeaveAndAJobTakesItBack) {
  constexpr uint64_t kBytes = 4096;
  const v1::RegisterJobRequest small = JobOf("small", 4096), other = JobOf("other", 2048);
  const uint64_t job = BytesOf(small);
  ASSERT_GT(job, 3 * kBytes);
  auto page = std::make_shared<prometheus::Registry>();
  ServerMetrics metrics(page);
  JobRegistry jobs(job + 3 * kBytes);
  KeptSums kept(&metrics, /*steps_per_shard=*/1, &jobs);
  jobs.SetBorrower(&kept);
  EXPECT_EQ(kept.Provide("room", 0, std::vector<uint64_t>(8, kBytes)), 0u);  // the bound alone
  auto publish = [&] { metrics.SetRam(jobs.ram_used(), jobs.ram_budget(), jobs.size()); };

  // No job: the recycled sums take the room, up to their own bound.
  kept.Recycle(SumsOf(10, kBytes));
  EXPECT_EQ(kept.free_bytes(), 8 * kBytes);
  EXPECT_EQ(jobs.lent(), 8 * kBytes);
  publish();
  EXPECT_EQ(Gauge(*page, "zerostate_replica_recycled_sum_bytes"), 8 * kBytes);
  EXPECT_EQ(Gauge(*page, "zerostate_ram_used_bytes"), 8 * kBytes);

  // A job that fits only in the lent room gets it: the idle sums are freed.
  auto registered = jobs.Register(small, kToken);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(kept.free_bytes(), 0u);
  EXPECT_EQ(jobs.lent(), 0u);

  // With the job there, only the room it leaves is recycled into.
  kept.Recycle(SumsOf(10, kBytes));
  EXPECT_EQ(kept.free_bytes(), 3 * kBytes);
  EXPECT_EQ(jobs.ram_used() + jobs.lent(), jobs.ram_budget());
  publish();
  EXPECT_EQ(Gauge(*page, "zerostate_replica_recycled_sum_bytes"), 3 * kBytes);
  EXPECT_EQ(Gauge(*page, "zerostate_ram_used_bytes"), job + 3 * kBytes);

  // A job that does not fit even in the lent room is refused, naming the
  // figures, and nothing is dropped.
  absl::Status refused = jobs.Register(other, kToken).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("needs " + std::to_string(BytesOf(other)) +
                                   " bytes of the RAM budget"),
            std::string::npos)
      << refused;
  EXPECT_EQ(kept.free_bytes(), 3 * kBytes);
  EXPECT_EQ(jobs.size(), 1u);

  // A sum received into a recycled buffer gives its room back.
  std::string reused = kept.Buffer(kBytes);
  EXPECT_EQ(reused.size(), kBytes);
  EXPECT_EQ(jobs.lent(), 2 * kBytes);
  EXPECT_EQ(Gauge(*page, "zerostate_replica_recycled_sum_bytes"), 2 * kBytes);

  // The job deleted, its room is lent again.
  ASSERT_TRUE(*jobs.Delete("small", kToken));
  kept.Recycle(SumsOf(10, kBytes));
  EXPECT_EQ(kept.free_bytes(), 8 * kBytes);
  EXPECT_EQ(jobs.lent(), 8 * kBytes);
}

TEST(KeptSumsTest, AppliedSumsAreReceivedIntoAgainUpToTheirBound) {
  constexpr uint64_t kBytes = 4096;
  KeptSums kept(nullptr, /*steps_per_shard=*/1);
  EXPECT_EQ(kept.Provide("j", 0, {kBytes, kBytes}), 0u);  // room for two sums, none made
  std::string first = kept.Buffer(kBytes);
  ASSERT_EQ(first.size(), kBytes);
  const char* memory = first.data();
  KeptSums::Sums applied;
  applied.emplace_back(0, std::move(first));
  applied.emplace_back(1, std::string(kBytes, 'x'));
  applied.emplace_back(2, std::string(kBytes, 'y'));  // past the bound: freed
  kept.Recycle(std::move(applied));
  EXPECT_EQ(kept.free_bytes(), 2 * kBytes);
  std::string other = kept.Buffer(kBytes / 2);  // no recycled one of that size
  EXPECT_EQ(other.size(), kBytes / 2);
  EXPECT_EQ(kept.free_bytes(), 2 * kBytes);
  std::string again = kept.Buffer(kBytes);
  std::string again2 = kept.Buffer(kBytes);
  EXPECT_EQ(again.size(), kBytes);
  EXPECT_EQ(again2.size(), kBytes);
  EXPECT_TRUE(again.data() == memory || again2.data() == memory)
      << "the applied sum's memory was not received into again";
  EXPECT_EQ(kept.free_bytes(), 0u);
  std::string fresh = kept.Buffer(kBytes);  // none left: a new one
  EXPECT_EQ(fresh.size(), kBytes);
}

// The first step a copy holds of a shard makes the buffers of the steps
// after it (steps_per_shard in all, the held ones and the one received),
// so no later step is received into fresh memory; a shard's room is made
// once, adds to the others', and goes with its job.
TEST(KeptSumsTest, TheFirstStepMakesTheHeldStepsBuffersAndTheJobsDeletionFreesThem) {
  constexpr uint64_t kBytes = 4096;
  JobRegistry jobs(uint64_t{1} << 30);
  KeptSums kept(nullptr, /*steps_per_shard=*/3, &jobs);
  jobs.SetBorrower(&kept);
  const std::vector<uint64_t> step = {kBytes, kBytes / 2};  // a shard's blocks' sums

  // Two more steps' buffers made at once, their bytes lent by the budget.
  EXPECT_EQ(kept.Provide("a", 0, step), 3 * kBytes);
  EXPECT_EQ(kept.free_bytes(), 3 * kBytes);
  EXPECT_EQ(jobs.lent(), 3 * kBytes);
  EXPECT_EQ(kept.Provide("a", 0, step), 0u);  // once per shard
  EXPECT_EQ(kept.free_bytes(), 3 * kBytes);

  // The next two steps are received into them.
  KeptSums::Sums received;
  for (int s = 0; s < 2; ++s) {
    for (uint64_t bytes : step) received.emplace_back(received.size(), kept.Buffer(bytes));
  }
  EXPECT_EQ(kept.free_bytes(), 0u);
  EXPECT_EQ(jobs.lent(), 0u);
  for (const auto& [block, sum] : received) EXPECT_EQ(sum.size(), step[block % 2]);

  // Three steps applied (the one in hand too): all kept for reuse.
  received.emplace_back(4, std::string(kBytes, 'x'));
  received.emplace_back(5, std::string(kBytes / 2, 'y'));
  kept.Recycle(std::move(received));
  EXPECT_EQ(kept.free_bytes(), 9 * kBytes / 2);
  EXPECT_EQ(jobs.lent(), 9 * kBytes / 2);

  // Another job's shard adds its room; deleting the first frees what is
  // beyond the second's.
  EXPECT_EQ(kept.Provide("b", 1, {kBytes}), 2 * kBytes);
  EXPECT_EQ(kept.free_bytes(), 13 * kBytes / 2);
  kept.Forget("a");
  EXPECT_LE(kept.free_bytes(), 3 * kBytes);
  EXPECT_EQ(jobs.lent(), kept.free_bytes());
  kept.Forget("b");
  EXPECT_EQ(kept.free_bytes(), 0u);
  EXPECT_EQ(jobs.lent(), 0u);
  // Its shard's room is made again for a job registered anew.
  EXPECT_EQ(kept.Provide("a", 0, step), 3 * kBytes);
}

}  // namespace
}  // namespace zerostate::server
