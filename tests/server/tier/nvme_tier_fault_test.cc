// Disk faults under the NVMe tier, injected through io::FaultEnv or
// written straight into its file: each fails with the documented code and
// a message naming the problem, the block and the file; every block keeps
// its previous state; and the tier works again once the fault is gone.
#include <fcntl.h>

#include <filesystem>
#include <unistd.h>

#include <gtest/gtest.h>

#include "server/core/io/fault_env.h"
#include "server/core/io/uring_env.h"
#include "server/core/tier/nvme_tier.h"
#include "tests/server/tier/tier_test_util.h"

namespace zerostate::server {
namespace {

using io::FaultKind;
using io::IoOp;

constexpr TierShape kShape{8, 256, 3};

void Step(uint64_t b, float* s) {
  for (size_t i = 0; i < kShape.block_floats(); ++i) s[i] = s[i] * 0.5f + static_cast<float>(b + 1);
}

class NvmeTierFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = std::make_shared<io::FaultEnv>(io::NewUringEnv());
    NvmeTierOptions o;
    o.dir = dir_.path();
    o.queue_depth = 3;
    o.env = env_;
    auto tier = NvmeTier::Create(kShape, o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    tier_ = *std::move(tier);
    for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
      ref_.push_back(RandomBlock(kShape, b, 9));
      ASSERT_TRUE(tier_->Store(b, ref_[b].data()).ok());
    }
    ASSERT_TRUE(UpdateAll().ok());  // slot B is now current everywhere, A holds the previous
  }

  // One step over every block; ref_ follows the blocks that were committed.
  absl::Status UpdateAll() {
    std::vector<uint64_t> all;
    for (uint64_t b = 0; b < kShape.num_blocks; ++b) all.push_back(b);
    committed_.assign(kShape.num_blocks, false);
    auto compute = [](uint64_t b, float* s) {
      Step(b, s);
      return true;
    };
    auto commit = [&](uint64_t b) {
      Step(b, ref_[b].data());
      committed_[b] = true;
    };
    return tier_->Update(all, pool_, compute, commit);
  }

  void ExpectAllIntact() {
    AlignedBuffer<float> out(kShape.block_floats());
    for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
      absl::Status s = tier_->Load(b, out.data());
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(FirstMismatch(ref_[b].data(), out.data(), out.size()), -1) << "block " << b;
    }
  }

  // The tier's file, opened again through /proc: it was unlinked when the
  // tier opened it (no scratch file survives the process), so its path no
  // longer names it. -1 if no descriptor of this process holds it.
  int ReopenTierFile() {
    const std::string deleted = tier_->path() + " (deleted)";
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      std::filesystem::path target = std::filesystem::read_symlink(entry.path(), ec);
      if (!ec && target.string() == deleted) return open(entry.path().c_str(), O_WRONLY);
    }
    return -1;
  }

  // Overwrites bytes of block b's slot (0: A, 1: B) behind the tier's back.
  void Scribble(uint64_t b, int slot, uint64_t at, size_t n) {
    int fd = ReopenTierFile();
    ASSERT_GE(fd, 0) << tier_->path() << " is not open in this process";
    std::string junk(n, '\x77');
    off_t off = static_cast<off_t>((b * 2 + slot) * tier_->slot_layout().slot_bytes + at);
    ASSERT_EQ(pwrite(fd, junk.data(), n, off), static_cast<ssize_t>(n));
    close(fd);
  }

  void ExpectNames(const absl::Status& s, absl::StatusCode code, const std::string& text,
                   uint64_t block) {
    EXPECT_EQ(s.code(), code) << s;
    for (const std::string& part :
         {text, "block " + std::to_string(block), tier_->path()}) {
      EXPECT_NE(s.message().find(part), absl::string_view::npos) << "'" << part << "' not in " << s;
    }
  }

  ScratchDir dir_;
  ThreadPool pool_{1};
  std::shared_ptr<io::FaultEnv> env_;
  std::unique_ptr<NvmeTier> tier_;
  std::vector<AlignedBuffer<float>> ref_;
  std::vector<bool> committed_;
};

struct FaultCase {
  const char* name;
  FaultKind kind;
  IoOp op;
  uint64_t block;  // requests are issued in block order: skip this many
  absl::StatusCode code;
  const char* text;
};

class UpdateFaultTest : public NvmeTierFaultTest,
                        public ::testing::WithParamInterface<FaultCase> {};

TEST_P(UpdateFaultTest, FailsNamingItKeepsPreviousStateAndRecovers) {
  const FaultCase& c = GetParam();
  env_->AddRule({c.kind, c.op, "", c.block, 1});
  absl::Status s = UpdateAll();
  ExpectNames(s, c.code, c.text, c.block);
  EXPECT_EQ(env_->faults_injected(), 1u);
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) EXPECT_EQ(committed_[b], b != c.block) << b;
  env_->ClearRules();
  ExpectAllIntact();
  ASSERT_TRUE(UpdateAll().ok());
  ExpectAllIntact();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, UpdateFaultTest,
    ::testing::Values(
        FaultCase{"EioOnRead", FaultKind::kEio, IoOp::kRead, 2, absl::StatusCode::kInternal,
                  "Input/output error"},
        FaultCase{"EioOnWrite", FaultKind::kEio, IoOp::kWrite, 3, absl::StatusCode::kInternal,
                  "Input/output error"},
        FaultCase{"EnospcOnWrite", FaultKind::kEnospc, IoOp::kWrite, 1,
                  absl::StatusCode::kResourceExhausted, "No space left on device"},
        FaultCase{"ShortRead", FaultKind::kShortRead, IoOp::kRead, 4,
                  absl::StatusCode::kDataLoss, "short read"},
        FaultCase{"CorruptRead", FaultKind::kCorrupt, IoOp::kRead, 5,
                  absl::StatusCode::kDataLoss, "checksum mismatch"}),
    [](const ::testing::TestParamInfo<FaultCase>& i) { return std::string(i.param.name); });

TEST_F(NvmeTierFaultTest, LoadFaultsFailAndLeaveStateReadable) {
  AlignedBuffer<float> out(kShape.block_floats());
  env_->AddRule({FaultKind::kEio, IoOp::kRead, "", 0, 1});
  ExpectNames(tier_->Load(6, out.data()), absl::StatusCode::kInternal, "Input/output error", 6);
  env_->AddRule({FaultKind::kShortRead, IoOp::kRead, "", 0, 1});
  ExpectNames(tier_->Load(6, out.data()), absl::StatusCode::kDataLoss, "short read", 6);
  env_->AddRule({FaultKind::kCorrupt, IoOp::kRead, "", 0, 1});
  ExpectNames(tier_->Load(6, out.data()), absl::StatusCode::kDataLoss, "slot B", 6);
  ExpectAllIntact();
}

TEST_F(NvmeTierFaultTest, StoreFaultKeepsPreviousState) {
  auto other = RandomBlock(kShape, 2, 77);
  env_->AddRule({FaultKind::kEnospc, IoOp::kWrite, "", 0, 1});
  ExpectNames(tier_->Store(2, other.data()), absl::StatusCode::kResourceExhausted,
              "No space left on device", 2);
  env_->AddRule({FaultKind::kEio, IoOp::kWrite, "", 0, 1});
  ExpectNames(tier_->Store(2, other.data()), absl::StatusCode::kInternal, "Input/output error", 2);
  ExpectAllIntact();
  ASSERT_TRUE(tier_->Store(2, other.data()).ok());
  std::memcpy(ref_[2].data(), other.data(), other.size() * sizeof(float));
  ExpectAllIntact();
}

TEST_F(NvmeTierFaultTest, TornWriteOfTheOtherSlotNeverHurtsTheCurrentOne) {
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) Scribble(b, /*slot A=*/0, 100, 3000);
  ExpectAllIntact();
  ASSERT_TRUE(UpdateAll().ok());  // rewrites slot A everywhere
  ExpectAllIntact();
}

TEST_F(NvmeTierFaultTest, CorruptionOnDiskIsDataLossUntilRewritten) {
  Scribble(3, /*slot B=*/1, 40, 8);
  AlignedBuffer<float> out(kShape.block_floats());
  ExpectNames(tier_->Load(3, out.data()), absl::StatusCode::kDataLoss, "checksum mismatch", 3);
  ExpectNames(UpdateAll(), absl::StatusCode::kDataLoss, "slot B", 3);
  EXPECT_FALSE(committed_[3]);
  ASSERT_TRUE(tier_->Store(3, ref_[3].data()).ok());  // repair from a good copy
  ExpectAllIntact();
}

TEST_F(NvmeTierFaultTest, DamagedTrailerIsDataLoss) {
  Scribble(5, 1, tier_->slot_layout().payload_bytes, 4);  // the magic number
  AlignedBuffer<float> out(kShape.block_floats());
  ExpectNames(tier_->Load(5, out.data()), absl::StatusCode::kDataLoss, "no valid slot trailer", 5);
}

}  // namespace
}  // namespace zerostate::server
