// A Job whose state lives on the NVMe tier against the same job on the RAM
// tier, driven directly (no network): the same pushes and steps give
// bit-identical fp32 weights and low-precision copies, and so does a RAM
// job admitted without room for its copy (its gathers convert the
// master). And the wiring: a
// server without --nvme_dir refuses NVMe jobs; RAM accounting counts only
// what an NVMe job keeps in RAM.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server/core/io/fault_env.h"
#include "server/core/io/uring_env.h"
#include "server/core/job_registry.h"
#include "server/rpc/job_proto.h"
#include "server/state_server.h"
#include "tests/server/tier/tier_test_util.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlockElems = 512;
constexpr uint32_t kNodes = 2;

v1::RegisterJobRequest Request(v1::StorageTier tier,
                               v1::MomentFormat format = v1::MOMENTS_FP32) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_moment_format(format);
  spec->set_job_id(tier == v1::TIER_NVME ? "on-nvme" : "in-ram");
  for (auto [name, n] : {std::pair{"emb", 3000}, std::pair{"head", 700}}) {
    auto* t = spec->add_tensors();
    t->set_name(name);
    t->add_shape(n);
  }
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->mutable_optimizer()->set_weight_decay(0.1f);
  spec->set_num_nodes(kNodes);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(kBlockElems);
  spec->set_seed(11);
  spec->set_tier(tier);
  req.add_servers("s0:1");
  req.add_servers("s1:1");
  req.set_shard_index(1);
  return req;
}

// A cache of two blocks of the shard's four (of fp32 moments unless
// `block_bytes` says otherwise).
TierOptions NvmeOptions(const std::string& dir, uint64_t block_bytes = kBlockElems * 3 * 4) {
  TierOptions o;
  o.nvme_dir = dir;
  o.nvme_cache_bytes = 2 * block_bytes;
  o.nvme_queue_depth = 3;
  return o;
}

// Pushes every node's gradient of `step` to every block of the job's shard.
void PushStep(Job& job, uint64_t step) {
  for (uint32_t node = 0; node < kNodes; ++node) {
    std::mt19937 rng(step * 31 + node);
    std::normal_distribution<float> d(0, 1);
    for (uint64_t b = job.blocks().begin; b < job.blocks().end; ++b) {
      std::vector<float> g(kBlockElems);
      for (float& x : g) x = d(rng);
      v1::Chunk c;
      c.set_job_id(job.spec().job_id());
      c.set_step(step);
      c.set_node(node);
      c.set_block(b);
      c.set_dtype(v1::DTYPE_FP32);
      c.set_data(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
      auto r = job.pushes().Push(c);
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
}

std::string GatherAll(Job& job, v1::DType dtype, uint64_t version) {
  v1::GatherRequest req;
  req.set_dtype(dtype);
  req.set_begin(job.blocks().begin * kBlockElems);
  req.set_end(job.blocks().end * kBlockElems);
  std::string out;
  auto s = job.gathers().Gather(*job.gathers().CheckGather(req), version, dtype, 1000,
                                absl::Now() + absl::Seconds(5), [&](const v1::Chunk& c) {
                                  out += c.data();
                                  return true;
                                });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

v1::StepRequest StepReq(uint64_t step) {
  v1::StepRequest req;
  req.set_step(step);
  req.set_lr(1e-2f);
  return req;
}

void ExpectNvmeBitIdenticalToRam(v1::MomentFormat format);

// With fp32 moments and with int8 moments (whose compact state is what the
// slots hold).
TEST(NvmeJobTest, BitIdenticalToRamTier) {
  for (auto format : {v1::MOMENTS_FP32, v1::MOMENTS_INT8}) {
    SCOPED_TRACE(v1::MomentFormat_Name(format));
    ExpectNvmeBitIdenticalToRam(format);
  }
}

void ExpectNvmeBitIdenticalToRam(v1::MomentFormat format) {
  ScratchDir dir;
  const uint64_t block_bytes =
      StateLayoutOf(*NormalizeJobSpec(Request(v1::TIER_RAM, format).spec())).total_floats() * 4;
  // A budget with room for the job without its bf16 copy, not with it.
  const v1::JobSpec ram_spec = *NormalizeJobSpec(Request(v1::TIER_RAM, format).spec());
  const uint64_t ram_blocks = ShardBlocks(LayoutOf(ram_spec).num_blocks(), 2, 1).size();
  const uint64_t least = Job::EstimateBytes(ram_spec, ram_blocks, TierOptions(), false);
  ASSERT_LT(least, Job::EstimateBytes(ram_spec, ram_blocks));
  JobRegistry ram_registry(1ull << 30), tight_registry(least),
      nvme_registry(1ull << 30, NvmeOptions(dir.path(), block_bytes));
  auto ram = ram_registry.Register(Request(v1::TIER_RAM, format));
  auto converting = tight_registry.Register(Request(v1::TIER_RAM, format));
  auto nvme = nvme_registry.Register(Request(v1::TIER_NVME, format));
  ASSERT_TRUE(ram.ok()) << ram.status();
  ASSERT_TRUE(converting.ok()) << converting.status();
  ASSERT_TRUE(nvme.ok()) << nvme.status();
  EXPECT_TRUE(ram->job->shard().keeps_lowp_copy());
  EXPECT_FALSE(converting->job->shard().keeps_lowp_copy());
  EXPECT_EQ(tight_registry.ram_used(), least);
  EXPECT_TRUE(nvme->job->shard().keeps_lowp_copy());
  const uint64_t blocks = nvme->job->blocks().size();
  ASSERT_GE(blocks, 3u);  // more than the cache holds
  // The shard file is open but unlinked (scratch space, server/core/tier/nvme_tier.h).
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  ThreadPool pool(2);
  for (uint64_t step = 0; step < 6; ++step) {
    for (Job* job : {ram->job.get(), converting->job.get(), nvme->job.get()}) {
      PushStep(*job, step);
      v1::StepRequest req = StepReq(step);
      req.set_skip(step == 3);  // a skipped step too
      auto out = job->step().Step(req, absl::Now() + absl::Seconds(5), pool);
      ASSERT_TRUE(out.ok()) << job->spec().job_id() << ": " << out.status();
    }
    // bf16: the converting job's gathers convert its master as they serve
    // it; the others serve the copy their pass wrote.
    for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
      std::string want = GatherAll(*ram->job, dtype, step + 1);
      ASSERT_EQ(want.size(), blocks * kBlockElems * (dtype == v1::DTYPE_FP32 ? 4 : 2));
      ASSERT_TRUE(want == GatherAll(*nvme->job, dtype, step + 1))
          << "step " << step << " dtype " << v1::DType_Name(dtype);
      ASSERT_TRUE(want == GatherAll(*converting->job, dtype, step + 1))
          << "converting, step " << step << " dtype " << v1::DType_Name(dtype);
    }
  }
}

// A disk error in the middle of a step fails the Step with the tier's
// status; the blocks already written are committed, the others stay at the
// old version with their old state, and a retry of the same step finishes
// it with weights bit-identical to a job that never saw the fault.
TEST(NvmeJobTest, StepFailedByDiskErrorIsRetriedToTheSameWeights) {
  ScratchDir dir;
  auto env = std::make_shared<io::FaultEnv>(io::NewUringEnv());
  TierOptions o = NvmeOptions(dir.path());
  o.env = env;
  JobRegistry ram_registry(1ull << 30), nvme_registry(1ull << 30, o);
  auto ram = ram_registry.Register(Request(v1::TIER_RAM));
  auto nvme = nvme_registry.Register(Request(v1::TIER_NVME));
  ASSERT_TRUE(ram.ok() && nvme.ok());
  ThreadPool pool(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  PushStep(*ram->job, 0);
  PushStep(*nvme->job, 0);
  ASSERT_TRUE(ram->job->step().Step(StepReq(0), deadline, pool).ok());
  env->AddRule({io::FaultKind::kEnospc, io::IoOp::kWrite, "", 1, 1});
  auto failed = nvme->job->step().Step(StepReq(0), deadline, pool);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted) << failed.status();
  EXPECT_NE(failed.status().message().find("No space left on device"), absl::string_view::npos);
  const ShardProgress progress = nvme->job->shard().Progress();
  EXPECT_EQ(progress.min_version, 0u);  // the failed block
  EXPECT_EQ(progress.max_version, 1u);  // the others
  env->ClearRules();
  auto retried = nvme->job->step().Step(StepReq(0), deadline, pool);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->params_stepped, kBlockElems);  // only the block that failed
  for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
    EXPECT_TRUE(GatherAll(*ram->job, dtype, 1) == GatherAll(*nvme->job, dtype, 1))
        << v1::DType_Name(dtype);
  }
}

// A skipped step under a running checkpoint saves each block's state first
// (copy-on-write); a block the tier cannot load fails the Step with the
// tier's own error, naming the block, and nothing is skipped; the retry
// then skips, and the checkpoint reads every block at its version (before,
// the Load error was dropped and the checkpoint failed later with an
// INTERNAL "moved past version ... without a copy-on-write snapshot").
TEST(NvmeJobTest, SkippedStepReportsTheTierLoadErrorOfACheckpointSnapshot) {
  ScratchDir dir;
  auto env = std::make_shared<io::FaultEnv>(io::NewUringEnv());
  TierOptions o = NvmeOptions(dir.path());
  o.env = env;
  JobRegistry registry(1ull << 30, o);
  auto nvme = registry.Register(Request(v1::TIER_NVME));
  ASSERT_TRUE(nvme.ok()) << nvme.status();
  Job& job = *nvme->job;
  ThreadPool pool(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::vector<std::vector<float>> want;  // each block's state at version 0
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    want.emplace_back(3 * kBlockElems);
    ASSERT_TRUE(job.snapshots().SnapshotBlock(local, 0, deadline, want.back().data()).ok());
  }
  PushStep(job, 0);
  auto guard = job.snapshots().BeginCheckpoint(0);
  ASSERT_TRUE(guard.ok()) << guard.status();
  // Every read from the disk comes back corrupted (the cache holds two of
  // the shard's blocks, so the others are read).
  env->AddRule({io::FaultKind::kCorrupt, io::IoOp::kRead, "", 0, UINT64_MAX});
  v1::StepRequest skip = StepReq(0);
  skip.set_skip(true);
  auto failed = job.step().Step(skip, deadline, pool);
  ASSERT_FALSE(failed.ok());
  EXPECT_GT(env->faults_injected(), 0u);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
  EXPECT_NE(failed.status().message().find("step 0 (skip): saving block"), absl::string_view::npos)
      << failed.status();
  EXPECT_EQ(job.shard().Progress().max_version, 0u);  // nothing skipped
  env->ClearRules();
  auto retried = job.step().Step(skip, deadline, pool);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->version, 1u);
  for (uint64_t local = 0; local < job.blocks().size(); ++local) {
    std::vector<float> got(3 * kBlockElems);
    absl::Status s = job.snapshots().SnapshotBlock(local, 0, deadline, got.data());
    ASSERT_TRUE(s.ok()) << "block " << local << ": " << s;
    EXPECT_EQ(FirstMismatch(got.data(), want[local].data(), got.size()), -1) << "block " << local;
  }
}

// fp32 gathers of the current version read the tier while the next step's
// I/O is in flight on the same blocks: they never fail, and the steps end
// where the RAM tier's do.
TEST(NvmeJobTest, GathersDuringStepsNeverFail) {
  ScratchDir dir;
  JobRegistry ram_registry(1ull << 30), nvme_registry(1ull << 30, NvmeOptions(dir.path()));
  auto ram = ram_registry.Register(Request(v1::TIER_RAM));
  auto nvme = nvme_registry.Register(Request(v1::TIER_NVME));
  ASSERT_TRUE(ram.ok() && nvme.ok());
  ThreadPool pool(2);
  for (uint64_t step = 0; step < 4; ++step) {
    PushStep(*ram->job, step);
    PushStep(*nvme->job, step);
    ASSERT_TRUE(ram->job->step().Step(StepReq(step), absl::Now() + absl::Seconds(5), pool).ok());
    std::thread gatherer([&] {
      for (int i = 0; i < 3; ++i) GatherAll(*nvme->job, v1::DTYPE_FP32, step);
    });
    auto out = nvme->job->step().Step(StepReq(step), absl::Now() + absl::Seconds(5), pool);
    gatherer.join();
    ASSERT_TRUE(out.ok()) << out.status();
  }
  EXPECT_TRUE(GatherAll(*ram->job, v1::DTYPE_FP32, 4) == GatherAll(*nvme->job, v1::DTYPE_FP32, 4));
}

TEST(NvmeJobTest, ServerRefusesAnNvmeDirItCannotWrite) {
  ServerOptions options;
  options.tls.plaintext = true;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.tiers.nvme_dir = "/tmp/zerostate-no-such-nvme-dir";
  auto server = StateServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
  EXPECT_NE(server.status().message().find("nvme_dir: '/tmp/zerostate-no-such-nvme-dir'"),
            absl::string_view::npos)
      << server.status();
}

TEST(NvmeJobTest, ServerWithoutNvmeDirRefusesNamingTheFlag) {
  JobRegistry registry(1ull << 30);
  auto r = registry.Register(Request(v1::TIER_NVME));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("--nvme_dir"), absl::string_view::npos) << r.status();
  EXPECT_EQ(registry.size(), 0u);
  auto bad = Request(v1::TIER_RAM);
  bad.mutable_spec()->set_tier(static_cast<v1::StorageTier>(7));
  r = registry.Register(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("tier: 7"), absl::string_view::npos) << r.status();
}

TEST(NvmeJobTest, RamAccountingCountsOnlyWhatStaysInRam) {
  ScratchDir dir;
  TierOptions o = NvmeOptions(dir.path());
  const uint64_t elems = 4ull * kBlockElems;
  const v1::JobSpec spec = Request(v1::TIER_NVME).spec();
  // bf16 copy + fp32 gradient sum per element, plus the cache budget, plus
  // the spec (kept three times).
  const uint64_t spec_bytes = 3 * spec.ByteSizeLong();
  EXPECT_EQ(Job::EstimateBytes(spec, 4, o), elems * (2 + 4) + o.nvme_cache_bytes + spec_bytes);
  o.nvme_cache_bytes = 1ull << 40;  // a budget larger than the state counts as the state
  EXPECT_EQ(Job::EstimateBytes(spec, 4, o), elems * (2 + 4) + elems * 12 + spec_bytes);
  const v1::JobSpec ram = Request(v1::TIER_RAM).spec();
  EXPECT_EQ(Job::EstimateBytes(ram, 4), elems * (2 + 4 + 12) + 3 * ram.ByteSizeLong());
  // Without its bf16 copy (a budget without room for it): 2 B less.
  EXPECT_EQ(Job::EstimateBytes(ram, 4, TierOptions(), false),
            elems * (4 + 12) + 3 * ram.ByteSizeLong());
  // One byte short of that: refused, naming the least it needs.
  const v1::JobSpec normalized = *NormalizeJobSpec(ram);
  const uint64_t least = Job::EstimateBytes(
      normalized, ShardBlocks(LayoutOf(normalized).num_blocks(), 2, 1).size(), TierOptions(), false);
  JobRegistry short_registry(least - 1);
  auto refused = short_registry.Register(Request(v1::TIER_RAM));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find(absl::StrCat("needs ", least, " bytes")),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(short_registry.ram_used(), 0u);

  JobRegistry registry(1ull << 30, NvmeOptions(dir.path()));
  auto r = registry.Register(Request(v1::TIER_NVME));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(registry.ram_used(), r->job->state_bytes());
  EXPECT_EQ(JobInfoOf(*r->job).state_bytes(), r->job->state_bytes());
  EXPECT_TRUE(*registry.Delete("on-nvme", r->token));  // the token Register generated
  EXPECT_EQ(registry.ram_used(), 0u);
}

}  // namespace
}  // namespace zerostate::server
