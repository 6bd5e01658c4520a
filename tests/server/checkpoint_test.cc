// Checkpoints driven without a network: write from S servers' shards,
// restore onto any other number with bit-identical continuation, taken
// while training goes on (copy-on-write), and every bad checkpoint refused
// with nothing loaded.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "server/core/checkpoint/checkpoint_files.h"
#include "server/core/checkpoint/checkpoint_reader.h"
#include "server/core/checkpoint/ckpt_tool.h"
#include "server/core/checkpoint/checkpoint_writer.h"
#include "server/core/job_registry.h"
#include "server/core/tier/state_tier.h"
#include "server/core/tier/tier_factory.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 128;

v1::JobSpec Spec(v1::MomentFormat format = v1::MOMENTS_FP32) {
  v1::JobSpec spec;
  spec.set_moment_format(format);
  spec.set_job_id("ck");
  auto* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(33);
  w->add_shape(21);
  auto* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(33);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_block_elems(kBlock);
  spec.set_seed(3);
  return spec;
}

std::vector<std::string> Servers(int n) {
  std::vector<std::string> s;
  for (int i = 0; i < n; ++i) s.push_back("s" + std::to_string(i) + ":1");
  return s;
}

// The token the job is registered and restored with.
constexpr char kToken[] = "checkpoint-test-token-0123456789abcdef01";

// A job sharded over n in-process "servers", each its own registry.
struct Cluster {
  explicit Cluster(int n, const TierOptions& tiers = TierOptions(),
                   v1::MomentFormat format = v1::MOMENTS_FP32, uint64_t budget = 1 << 30)
      : pool(2), format(format) {
    for (int i = 0; i < n; ++i) registries.push_back(std::make_unique<JobRegistry>(budget, tiers));
  }
  void Register() {
    for (size_t i = 0; i < registries.size(); ++i) {
      v1::RegisterJobRequest req;
      *req.mutable_spec() = Spec(format);
      for (auto& s : Servers(registries.size())) req.add_servers(s);
      req.set_shard_index(i);
      ASSERT_TRUE(registries[i]->Register(req, kToken).ok());
    }
  }
  // `format`: restore into a job of that moment format.
  absl::Status Restore(const std::string& dir, std::optional<v1::MomentFormat> format = {}) {
    for (size_t i = 0; i < registries.size(); ++i) {
      v1::RestoreRequest req;
      req.set_path(dir);
      if (format.has_value()) req.set_moment_format(*format);
      for (auto& s : Servers(registries.size())) req.add_servers(s);
      req.set_shard_index(i);
      if (auto r = registries[i]->Restore(req, kToken); !r.ok()) return r.status();
    }
    return absl::OkStatus();
  }
  Job& job(size_t i) { return **registries[i]->Get("ck"); }
  // One step with a gradient that depends only on (step, element); `skip`:
  // sent as skipped (an fp16 overflow).
  void Step(uint64_t step, bool skip = false) {
    for (size_t i = 0; i < registries.size(); ++i) {
      Job& j = job(i);
      for (uint64_t b = j.blocks().begin; b < j.blocks().end; ++b) {
        std::vector<float> g(kBlock);
        for (uint32_t e = 0; e < kBlock; ++e) g[e] = std::sin(0.1f * (b * kBlock + e) + step);
        v1::Chunk c;
        c.set_job_id("ck");
        c.set_step(step);
        c.set_block(b);
        c.set_dtype(v1::DTYPE_FP32);
        c.set_data(std::string(reinterpret_cast<char*>(g.data()), g.size() * 4));
        ASSERT_TRUE(j.pushes().Push(c).ok());
      }
      v1::StepRequest req;
      req.set_step(step);
      req.set_lr(0.01f);
      req.set_skip(skip);
      req.set_trainer_state(absl::StrCat("trainer state of version ", step + 1));
      ASSERT_TRUE(j.step().Step(req, absl::Now() + absl::Seconds(5), pool).ok());
    }
  }
  // The whole job's weights in `dtype`, gathered shard by shard, as bytes.
  std::string Gathered(uint64_t version, v1::DType dtype) {
    std::string out;
    for (size_t i = 0; i < registries.size(); ++i) {
      v1::GatherRequest req;
      req.set_dtype(dtype);
      Job& j = job(i);
      auto s = j.gathers().Gather(*j.gathers().CheckGather(req), version, dtype, 1000,
                                  absl::Now() + absl::Seconds(5), [&](const v1::Chunk& c) {
                                    out += c.data();
                                    return true;
                                  });
      EXPECT_TRUE(s.ok()) << s;
    }
    return out;
  }
  // The fp32 master weights of the whole job.
  std::vector<float> Weights(uint64_t version) {
    const std::string bytes = Gathered(version, v1::DTYPE_FP32);
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  std::string Checkpoint(const std::string& root, uint64_t version) {
    std::string dir;
    for (size_t i = 0; i < registries.size(); ++i) {
      auto w = WriteCheckpoint(job(i), version, root, absl::Now() + absl::Seconds(5));
      EXPECT_TRUE(w.ok()) << w.status();
      dir = w->dir;
    }
    return dir;
  }
  ThreadPool pool;
  const v1::MomentFormat format;
  std::vector<std::unique_ptr<JobRegistry>> registries;
};

// A tier that runs a hook (when set) in each Update between a block's
// compute and its commit: where a step has changed the block's state but
// not yet its version. Everything else goes to the tier it wraps.
class HookedTier final : public StateTier {
 public:
  using Hook = std::function<void(uint64_t b)>;
  HookedTier(std::unique_ptr<StateTier> inner, const Hook* before_commit)
      : StateTier(inner->shape()), inner_(std::move(inner)), before_commit_(before_commit) {}

  absl::Status Load(uint64_t b, float* out) override { return inner_->Load(b, out); }
  absl::Status Store(uint64_t b, const float* in) override { return inner_->Store(b, in); }
  absl::Status Update(const std::vector<uint64_t>& blocks, ThreadPool& pool,
                      const std::function<bool(uint64_t b, float* state)>& compute,
                      const std::function<void(uint64_t b)>& commit) override {
    return inner_->Update(blocks, pool, compute, [&](uint64_t b) {
      if (*before_commit_) (*before_commit_)(b);
      commit(b);
    });
  }
  bool in_place() const override { return inner_->in_place(); }
  uint64_t ram_bytes() const override { return inner_->ram_bytes(); }
  const float* Resident(uint64_t b) override { return inner_->Resident(b); }

 private:
  std::unique_ptr<StateTier> inner_;
  const Hook* before_commit_;
};

// Tier options under which every job's tier runs *before_commit (set and
// cleared only while no step runs).
TierOptions HookedTiers(const HookedTier::Hook* before_commit) {
  TierOptions tiers;
  tiers.wrap = [before_commit](std::unique_ptr<StateTier> inner) -> std::unique_ptr<StateTier> {
    return std::make_unique<HookedTier>(std::move(inner), before_commit);
  };
  return tiers;
}

// Runs step `step` on `a` (whose tiers run *before_commit): in the first
// window between a block's compute and commit, starts `reader` on a thread
// of its own and gives it up to 200 ms to finish there (a reader that does
// not wait for the commit reads the block inside the window), then lets
// the step commit. Returns once the reader is done.
void StepWithReaderInWindow(Cluster& a, HookedTier::Hook& before_commit, uint64_t step,
                            const std::function<void()>& reader) {
  absl::Notification done;
  std::thread thread;
  std::once_flag once;
  before_commit = [&](uint64_t) {
    std::call_once(once, [&] {
      thread = std::thread([&] {
        reader();
        done.Notify();
      });
      done.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    });
  };
  a.Step(step);
  before_commit = nullptr;
  thread.join();
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/zs-ckpt-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_;
};

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << "'" << needle << "' not in: " << s;
}

TEST_F(CheckpointTest, RestoresOntoAnyServerCountWithBitIdenticalContinuation) {
  for (auto [from, to] : {std::pair{1, 3}, std::pair{3, 2}}) {
    Cluster a(from);
    a.Register();
    a.Step(0);
    a.Step(1);
    std::string dir = a.Checkpoint(root_ + "/" + std::to_string(from), 2);
    auto reader = CheckpointReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->num_shards(), static_cast<uint32_t>(from));
    EXPECT_TRUE((*reader)->VerifyAll().ok());

    Cluster b(to);
    ASSERT_TRUE(b.Restore(dir).ok());
    EXPECT_EQ(b.job(0).shard().Progress().min_version, 2u);
    EXPECT_EQ(b.Weights(2), a.Weights(2)) << from << " -> " << to;
    a.Step(2);
    b.Step(2);  // Adam's moments and step count came back too
    EXPECT_EQ(b.Weights(3), a.Weights(3)) << from << " -> " << to;
  }
}

// A restore onto a server whose budget has room for the job only without
// its bf16 weight copy: admitted without it, its gathers serve the bits the
// copy would hold, before and after the next step.
TEST_F(CheckpointTest, RestoredWithoutRoomForTheWeightCopyServesTheSameBits) {
  Cluster a(1);
  a.Register();
  a.Step(0);
  a.Step(1);
  const std::string dir = a.Checkpoint(root_ + "/tight", 2);
  const v1::JobSpec spec = *NormalizeJobSpec(Spec());
  const uint64_t blocks = LayoutOf(spec).num_blocks();
  const uint64_t without = Job::EstimateBytes(spec, blocks, TierOptions(), false);
  const uint64_t with = Job::EstimateBytes(spec, blocks);
  ASSERT_LT(without, with);
  Cluster b(1, TierOptions(), v1::MOMENTS_FP32, (without + with) / 2);
  ASSERT_TRUE(b.Restore(dir).ok());
  EXPECT_FALSE(b.job(0).shard().keeps_lowp_copy());
  EXPECT_TRUE(a.job(0).shard().keeps_lowp_copy());
  EXPECT_EQ(b.Gathered(2, v1::DTYPE_BF16), a.Gathered(2, v1::DTYPE_BF16));
  a.Step(2);
  b.Step(2);
  EXPECT_EQ(b.Gathered(3, v1::DTYPE_BF16), a.Gathered(3, v1::DTYPE_BF16));
  EXPECT_EQ(b.Weights(3), a.Weights(3));
}

// Compact moments are written as the tier holds them (the manifest's spec
// names the format) and come back bit for bit onto another server count.
TEST_F(CheckpointTest, CompactMomentsRoundTripBitIdentical) {
  for (auto format : {v1::MOMENTS_BF16, v1::MOMENTS_INT8}) {
    Cluster a(1, TierOptions(), format);
    a.Register();
    a.Step(0);
    a.Step(1);
    const std::string dir = a.Checkpoint(root_ + "/" + v1::MomentFormat_Name(format), 2);
    auto reader = CheckpointReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->spec().moment_format(), format);
    EXPECT_LT((*reader)->block_floats(), 3u * kBlock);  // compact on disk
    Cluster b(2, TierOptions(), format);
    ASSERT_TRUE(b.Restore(dir).ok());
    EXPECT_EQ(b.Weights(2), a.Weights(2));
    a.Step(2);
    b.Step(2);
    EXPECT_EQ(b.Weights(3), a.Weights(3)) << v1::MomentFormat_Name(format);
    // Its checkpoint holds the same bytes as the original's next one.
    const std::string again = b.Checkpoint(root_ + "/again" + v1::MomentFormat_Name(format), 3);
    const std::string first = a.Checkpoint(root_ + "/first" + v1::MomentFormat_Name(format), 3);
    AlignedBuffer<float> x((*reader)->block_floats()), y((*reader)->block_floats());
    auto ra = CheckpointReader::Open(first), rb = CheckpointReader::Open(again);
    ASSERT_TRUE(ra.ok() && rb.ok());
    for (uint64_t blk = 0; blk < (*ra)->layout().num_blocks(); ++blk) {
      ASSERT_TRUE((*ra)->ReadBlock(blk, x.data()).ok());
      ASSERT_TRUE((*rb)->ReadBlock(blk, y.data()).ok());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0) << "block " << blk;
    }
  }
}

// A restore into a job of another moment format converts each block's
// moments (decoded exactly into fp32 here); the export writes the same
// fp32 moments from either checkpoint.
TEST_F(CheckpointTest, RestoreIntoAnotherMomentFormatConverts) {
  Cluster a(1, TierOptions(), v1::MOMENTS_INT8);
  a.Register();
  a.Step(0);
  a.Step(1);
  const std::string dir = a.Checkpoint(root_ + "/int8", 2);
  Cluster b(2, TierOptions(), v1::MOMENTS_FP32);
  ASSERT_TRUE(b.Restore(dir, v1::MOMENTS_FP32).ok());
  EXPECT_EQ(b.job(1).spec().moment_format(), v1::MOMENTS_FP32);
  EXPECT_EQ(b.Weights(2), a.Weights(2));
  const std::string wide = b.Checkpoint(root_ + "/fp32", 2);
  ASSERT_TRUE(ExportSafetensors(dir, root_ + "/int8.safetensors", /*with_moments=*/true).ok());
  ASSERT_TRUE(ExportSafetensors(wide, root_ + "/fp32.safetensors", true).ok());
  ASSERT_TRUE(ExportSafetensors(wide, root_ + "/master.safetensors").ok());
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string i8 = slurp(root_ + "/int8.safetensors"), f32 = slurp(root_ + "/fp32.safetensors");
  EXPECT_EQ(i8, f32);
  EXPECT_NE(i8.find("\"w.exp_avg_sq\""), std::string::npos);
  // The data after the header: master, exp_avg and exp_avg_sq of 33 * 21 +
  // 33 elements, against the master alone.
  auto data_bytes = [](const std::string& file) {
    uint64_t header = 0;
    std::memcpy(&header, file.data(), 8);
    return file.size() - 8 - header;
  };
  EXPECT_EQ(data_bytes(i8), 3u * 4 * (33 * 21 + 33));
  EXPECT_EQ(data_bytes(slurp(root_ + "/master.safetensors")), 4u * (33 * 21 + 33));
  b.Step(2);  // and the converted job steps on
  EXPECT_EQ(b.job(0).shard().Progress().min_version, 3u);
}

TEST_F(CheckpointTest, TakenWhileTrainingGoesOn) {
  Cluster a(1);
  a.Register();
  a.Step(0);
  auto guard = a.job(0).snapshots().BeginCheckpoint(2);  // copy-on-write from here on
  ASSERT_TRUE(guard.ok()) << guard.status();
  absl::StatusOr<CheckpointWritten> written;
  std::thread writer([&] {
    written = WriteCheckpoint(a.job(0), *std::move(guard), 2, root_,
                              absl::Now() + absl::Seconds(10));
  });
  a.Step(1);
  std::vector<float> at2 = a.Weights(2);
  a.Step(2);  // may move blocks past 2 before the writer reaches them
  a.Step(3);
  writer.join();
  ASSERT_TRUE(written.ok()) << written.status();
  Cluster b(2);
  ASSERT_TRUE(b.Restore(written->dir).ok());
  EXPECT_EQ(b.Weights(2), at2);
}

// The interleaving TakenWhileTrainingGoesOn only sometimes hits: the writer
// reads a block after step 2 has computed it (its state in the tier is
// version 3's) but before the step committed it (its version still says
// 2). What is written must be the copy-on-write snapshot.
TEST_F(CheckpointTest, WrittenWhileAStepIsBetweenComputeAndCommit) {
  HookedTier::Hook before_commit;
  Cluster a(1, HookedTiers(&before_commit));
  a.Register();
  a.Step(0);
  a.Step(1);
  std::vector<float> at2 = a.Weights(2);
  auto guard = a.job(0).snapshots().BeginCheckpoint(2);
  ASSERT_TRUE(guard.ok()) << guard.status();
  absl::StatusOr<CheckpointWritten> written;
  std::once_flag once;
  before_commit = [&](uint64_t) {
    std::call_once(once, [&] {
      written =
          WriteCheckpoint(a.job(0), *std::move(guard), 2, root_, absl::Now() + absl::Seconds(10));
    });
  };
  a.Step(2);
  before_commit = nullptr;
  a.Step(3);
  ASSERT_TRUE(written.ok()) << written.status();
  Cluster b(1);
  ASSERT_TRUE(b.Restore(written->dir).ok());
  EXPECT_EQ(b.Weights(2), at2);
}

// A checkpoint of version 2 begun while step 2 is between a block's compute
// and its commit (no copy-on-write was in force when the block was
// computed): it is refused as from the past, or else holds version 2.
TEST_F(CheckpointTest, BegunWhileAStepIsBetweenComputeAndCommit) {
  HookedTier::Hook before_commit;
  Cluster a(1, HookedTiers(&before_commit));
  a.Register();
  a.Step(0);
  a.Step(1);
  std::vector<float> at2 = a.Weights(2);
  absl::StatusOr<CheckpointWritten> written;
  // A checkpoint that does not wait for the step is written inside the
  // window; one that waits is refused afterwards.
  StepWithReaderInWindow(a, before_commit, 2, [&] {
    written = WriteCheckpoint(a.job(0), 2, root_, absl::Now() + absl::Seconds(10));
  });
  if (!written.ok()) {
    ExpectError(written.status(), absl::StatusCode::kFailedPrecondition, "from the past");
    return;
  }
  Cluster b(1);
  ASSERT_TRUE(b.Restore(written->dir).ok());
  EXPECT_EQ(b.Weights(2), at2);
}

// A gather that reaches a block between a step's compute and commit (the
// tier's state, and the in-place bf16 copy, already the next version's;
// the version not yet raised) waits for the commit: every piece holds the
// weights of the version it names, fp32 and bf16 alike.
TEST_F(CheckpointTest, GatherBetweenComputeAndCommitServesTheVersionItNames) {
  for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    HookedTier::Hook before_commit;
    Cluster a(1, HookedTiers(&before_commit));
    a.Register();
    a.Step(0);
    a.Step(1);
    auto gather_all = [&](uint64_t min_version, std::vector<v1::Chunk>* out) {
      v1::GatherRequest req;
      req.set_dtype(dtype);
      Job& j = a.job(0);
      return j.gathers().Gather(*j.gathers().CheckGather(req), min_version, dtype, 1000,
                                absl::Now() + absl::Seconds(10), [out](const v1::Chunk& c) {
                                  out->push_back(c);
                                  return true;
                                });
    };
    std::vector<v1::Chunk> at2;
    ASSERT_TRUE(gather_all(2, &at2).ok());
    std::vector<v1::Chunk> during;
    absl::Status during_status;
    StepWithReaderInWindow(a, before_commit, 2, [&] { during_status = gather_all(2, &during); });
    ASSERT_TRUE(during_status.ok()) << during_status;
    std::vector<v1::Chunk> at3;
    ASSERT_TRUE(gather_all(3, &at3).ok());
    ASSERT_EQ(during.size(), at2.size());
    for (size_t i = 0; i < during.size(); ++i) {
      const v1::Chunk& want = during[i].version() == 2 ? at2[i] : at3[i];
      ASSERT_EQ(want.version(), during[i].version()) << "piece " << i;
      EXPECT_EQ(during[i].data(), want.data())
          << "piece " << i << " labelled version " << during[i].version();
    }
  }
}

TEST_F(CheckpointTest, CheckpointOfThePastIsRefused) {
  Cluster a(1);
  a.Register();
  a.Step(0);
  a.Step(1);
  ExpectError(WriteCheckpoint(a.job(0), 1, root_, absl::Now()).status(),
              absl::StatusCode::kFailedPrecondition, "from the past");
  ExpectError(WriteCheckpoint(a.job(0), 5, root_, absl::Now() + absl::Milliseconds(20)).status(),
              absl::StatusCode::kDeadlineExceeded, "version 5");
  ExpectError(WriteCheckpoint(a.job(0), 2, "relative/dir", absl::Now()).status(),
              absl::StatusCode::kInvalidArgument, "root");
}

class BadCheckpointTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    Cluster a(2);
    a.Register();
    a.Step(0);
    dir_ = a.Checkpoint(root_, 1);
    target_ = std::make_unique<Cluster>(1);
    target_->Register();
    before_ = target_->Weights(0);
  }
  // The restore fails with `code` naming `needle`, and the target keeps its job.
  void ExpectRefused(absl::StatusCode code, const std::string& needle) {
    ExpectError(target_->Restore(dir_), code, needle);
    EXPECT_EQ(target_->job(0).shard().Progress().min_version, 0u);
    EXPECT_EQ(target_->Weights(0), before_);
  }
  void EditManifest(const std::function<void(v1::ShardManifest&)>& edit) {
    std::string path = dir_ + "/" + ShardManifestName(1, 2);
    auto m = *ReadManifest(path);
    edit(m);
    ASSERT_TRUE(WriteManifest(path, m).ok());
  }
  std::string dir_;
  std::unique_ptr<Cluster> target_;
  std::vector<float> before_;
};

// The trainer's state of the checkpoint's version (StepRequest.trainer_state)
// comes back with the job, on every server of any count.
TEST_F(CheckpointTest, RestoredJobKeepsTheTrainerStateOfItsVersion) {
  Cluster a(2);
  a.Register();
  a.Step(0);
  a.Step(1);
  std::string dir = a.Checkpoint(root_, 2);
  Cluster b(3);
  ASSERT_TRUE(b.Restore(dir).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b.job(i).step().trainer_states().Find(2), "trainer state of version 2")
        << "server " << i;
  }
}

// Adam's bias correction counts applied steps; a checkpoint keeps the count
// (ShardManifest.applied_steps), so a restored job continues as the
// original does after a skipped step.
TEST_F(CheckpointTest, SkippedStepsStayUncountedAcrossARestore) {
  Cluster a(2);
  a.Register();
  a.Step(0);
  a.Step(1, /*skip=*/true);
  a.Step(2);
  std::string dir = a.Checkpoint(root_, 3);
  auto reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (const auto& m : (*reader)->manifests()) {
    EXPECT_TRUE(m.has_applied_steps());
    EXPECT_EQ(m.applied_steps(), 2u);
  }
  Cluster b(3);
  ASSERT_TRUE(b.Restore(dir).ok());
  a.Step(3);
  b.Step(3);
  EXPECT_EQ(b.Weights(4), a.Weights(4));

  // A checkpoint from before the field counts every step, as its writer did.
  for (uint32_t shard : {0u, 1u}) {
    std::string path = dir + "/" + ShardManifestName(shard, 2);
    auto m = *ReadManifest(path);
    m.clear_applied_steps();
    ASSERT_TRUE(WriteManifest(path, m).ok());
  }
  Cluster c(1);
  ASSERT_TRUE(c.Restore(dir).ok());
  c.Step(3);
  EXPECT_NE(c.Weights(4), a.Weights(4));
}

TEST_F(BadCheckpointTest, MoreAppliedStepsThanTheVersion) {
  for (uint32_t shard : {0u, 1u}) {
    std::string path = dir_ + "/" + ShardManifestName(shard, 2);
    auto m = *ReadManifest(path);
    m.set_applied_steps(2);
    ASSERT_TRUE(WriteManifest(path, m).ok());
  }
  ExpectRefused(absl::StatusCode::kDataLoss, "applied_steps 2 is more than the version 1");
}

TEST_F(BadCheckpointTest, ShardsThatDisagreeOnTheAppliedSteps) {
  EditManifest([](v1::ShardManifest& m) { m.set_applied_steps(0); });
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "applied steps");
}

TEST_F(BadCheckpointTest, TrainerStateTooLargeToComeFromAStep) {
  for (uint32_t shard : {0u, 1u}) {
    std::string path = dir_ + "/" + ShardManifestName(shard, 2);
    auto m = *ReadManifest(path);
    m.set_trainer_state(std::string(2000, 'x'));
    ASSERT_TRUE(WriteManifest(path, m).ok());
  }
  ExpectRefused(absl::StatusCode::kDataLoss, "trainer_state");
}

TEST_F(BadCheckpointTest, ShardsThatDisagreeOnTheTrainerState) {
  EditManifest([](v1::ShardManifest& m) { m.set_trainer_state("another"); });
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "trainer state");
}

TEST_F(BadCheckpointTest, MissingManifest) {
  std::filesystem::remove(dir_ + "/" + ShardManifestName(1, 2));
  ExpectRefused(absl::StatusCode::kNotFound, ShardManifestName(1, 2));
}

TEST_F(BadCheckpointTest, MissingDataFile) {
  std::filesystem::remove(dir_ + "/" + ShardDataName(0, 2));
  ExpectRefused(absl::StatusCode::kNotFound, ShardDataName(0, 2));
}

TEST_F(BadCheckpointTest, WrongChecksum) {
  std::fstream f(dir_ + "/" + ShardDataName(1, 2), std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(10);
  f.put('\x7f');
  f.close();
  ExpectRefused(absl::StatusCode::kDataLoss, "checksum mismatch in block");
}

TEST_F(BadCheckpointTest, NewerFormatVersion) {
  EditManifest([](v1::ShardManifest& m) { m.set_format_version(2); });
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "format version 2 is newer");
}

TEST_F(BadCheckpointTest, ShardsThatDisagree) {
  EditManifest([](v1::ShardManifest& m) { m.mutable_spec()->mutable_tensors(1)->set_shape(0, 34); });
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "disagrees with shard 0");
}

TEST_F(BadCheckpointTest, DifferentLayoutThanTheRegisteredJob) {
  for (int i = 0; i < 2; ++i) {
    std::string path = dir_ + "/" + ShardManifestName(i, 2);
    auto m = *ReadManifest(path);
    m.mutable_spec()->mutable_tensors(0)->set_name("renamed");
    ASSERT_TRUE(WriteManifest(path, m).ok());
  }
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "differs from the registered job");
}

// Found by tests/fuzz/manifest_fuzzer (crashes/manifest-no-block-elems.json):
// a manifest without block_elems divided by zero before it was checked.
TEST_F(BadCheckpointTest, ManifestWithoutBlockSize) {
  EditManifest([](v1::ShardManifest& m) { m.mutable_spec()->clear_block_elems(); });
  ExpectRefused(absl::StatusCode::kDataLoss, "job spec is incomplete");
}

TEST_F(BadCheckpointTest, UnknownMomentFormat) {
  for (uint32_t shard : {0u, 1u}) {
    std::string path = dir_ + "/" + ShardManifestName(shard, 2);
    auto m = *ReadManifest(path);
    m.mutable_spec()->set_moment_format(static_cast<v1::MomentFormat>(7));
    ASSERT_TRUE(WriteManifest(path, m).ok());
  }
  ExpectRefused(absl::StatusCode::kFailedPrecondition, "moment_format: 7 is not one of");
}

TEST_F(BadCheckpointTest, UnknownMomentFormatAsked) {
  ExpectError(target_->Restore(dir_, static_cast<v1::MomentFormat>(9)),
              absl::StatusCode::kInvalidArgument, "moment_format: 9 is not one of");
  EXPECT_EQ(target_->job(0).shard().Progress().min_version, 0u);
  EXPECT_EQ(target_->Weights(0), before_);
}

TEST_F(BadCheckpointTest, WrongNumberOfStateArrays) {
  EditManifest([](v1::ShardManifest& m) { m.set_arrays(0); });
  ExpectRefused(absl::StatusCode::kDataLoss, "state arrays");
}

// A manifest must not point the reader at files outside the checkpoint.
TEST_F(BadCheckpointTest, DataFileOutsideTheCheckpoint) {
  EditManifest([](v1::ShardManifest& m) { m.set_data_file("../../etc/passwd"); });
  ExpectRefused(absl::StatusCode::kDataLoss, "data_file");
}

TEST_F(BadCheckpointTest, ShardCountThatContradictsTheFileName) {
  EditManifest([](v1::ShardManifest& m) { m.set_num_shards(0); });
  ExpectRefused(absl::StatusCode::kDataLoss, "num_shards 0");
}

TEST_F(BadCheckpointTest, UnparsableManifestAndWrongJobId) {
  {
    std::ofstream f(dir_ + "/" + ShardManifestName(1, 2));
    f << "{ not json";
  }
  ExpectRefused(absl::StatusCode::kDataLoss, "not valid");
}

}  // namespace
}  // namespace zerostate::server
