// NvmeTier against RamTier: the same Stores and Updates (random compute
// functions, some blocks left alone) give bit-identical state, whatever
// the queue depth and cache budget; the cache stays within its budget.
#include "server/core/tier/nvme_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "server/core/io/uring_env.h"
#include "server/core/tier/ram_tier.h"
#include "tests/server/tier/tier_test_util.h"

namespace zerostate::server {
namespace {

constexpr TierShape kShape{13, 256, 3};

class CountingSink final : public TierMetricsSink {
 public:
  void RecordIo(io::IoOp op, uint64_t bytes, double) override {
    (op == io::IoOp::kRead ? read : written) += bytes;
  }
  void SetQueueDepth(int n) override { max_depth = std::max(max_depth.load(), n); }
  void RecordCache(bool hit) override { ++(hit ? hits : misses); }
  std::atomic<uint64_t> read{0}, written{0}, hits{0}, misses{0};
  std::atomic<int> max_depth{0};
};

std::unique_ptr<NvmeTier> MakeNvme(const std::string& dir, uint64_t cache_bytes, int depth,
                                   std::shared_ptr<TierMetricsSink> sink = nullptr,
                                   std::shared_ptr<io::Env> env = nullptr) {
  NvmeTierOptions o;
  o.env = std::move(env);
  o.dir = dir;
  o.cache_bytes = cache_bytes;
  o.queue_depth = depth;
  o.metrics = std::move(sink);
  auto tier = NvmeTier::Create(kShape, o);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? *std::move(tier) : nullptr;
}

// state = state * a + c elementwise, with (a, c) drawn per (round, block);
// about one block in five is left alone (compute returns false).
bool LeftAlone(uint64_t round, uint64_t b) {
  return std::mt19937(static_cast<uint32_t>(round * 7919 + b))() % 5 == 0;
}

bool RandomCompute(uint64_t round, uint64_t b, float* state) {
  if (LeftAlone(round, b)) return false;
  std::mt19937 rng(static_cast<uint32_t>(round * 104729 + b));
  std::uniform_real_distribution<float> d(-1.5f, 1.5f);
  float a = d(rng), c = d(rng);
  for (size_t i = 0; i < kShape.block_floats(); ++i) state[i] = state[i] * a + c;
  return true;
}

void ExpectSameState(StateTier& want, StateTier& got) {
  AlignedBuffer<float> x(kShape.block_floats()), y(kShape.block_floats());
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
    ASSERT_TRUE(want.Load(b, x.data()).ok());
    absl::Status s = got.Load(b, y.data());
    ASSERT_TRUE(s.ok()) << s;
    long i = FirstMismatch(x.data(), y.data(), x.size());
    ASSERT_EQ(i, -1) << "block " << b << " float " << i << ": " << x.data()[i] << " vs "
                     << y.data()[i];
  }
}

struct Config {
  uint64_t cache_blocks;
  int depth;
  bool sync = false;  // pread/pwrite instead of io_uring
};

class NvmeVsRamTest : public ::testing::TestWithParam<Config> {};

TEST_P(NvmeVsRamTest, BitIdenticalAfterManyUpdates) {
  ScratchDir dir;
  const uint64_t entry = kShape.block_floats() * sizeof(float);
  auto nvme = MakeNvme(dir.path(), GetParam().cache_blocks * entry, GetParam().depth, nullptr,
                       GetParam().sync ? io::NewSyncEnv() : nullptr);
  ASSERT_NE(nvme, nullptr);
  RamTier ram(kShape);
  ThreadPool pool(2);
  for (uint64_t b = 0; b < kShape.num_blocks; b += 2) {  // odd blocks start as zeros
    auto init = RandomBlock(kShape, b, 1);
    ASSERT_TRUE(ram.Store(b, init.data()).ok());
    ASSERT_TRUE(nvme->Store(b, init.data()).ok());
  }
  std::mt19937 rng(3);
  for (uint64_t round = 0; round < 25; ++round) {
    std::vector<uint64_t> blocks;
    for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
      if (rng() % 4 != 0) blocks.push_back(b);
    }
    std::vector<int> computed(kShape.num_blocks), committed(kShape.num_blocks);
    auto compute = [&](uint64_t b, float* s) {
      ++computed[b];
      return RandomCompute(round, b, s);
    };
    auto commit = [&](uint64_t b) {
      EXPECT_EQ(computed[b], 1) << "commit before compute of block " << b;
      ++committed[b];
    };
    auto ram_compute = [&](uint64_t b, float* s) { return RandomCompute(round, b, s); };
    ASSERT_TRUE(ram.Update(blocks, pool, ram_compute, [](uint64_t) {}).ok());
    ASSERT_TRUE(nvme->Update(blocks, pool, compute, commit).ok());
    for (uint64_t b : blocks) EXPECT_EQ(committed[b], LeftAlone(round, b) ? 0 : 1) << b;
  }
  ExpectSameState(ram, *nvme);
}

INSTANTIATE_TEST_SUITE_P(DepthsAndBudgets, NvmeVsRamTest,
                         ::testing::Values(Config{0, 2}, Config{0, 8}, Config{4, 3},
                                           Config{13, 16}, Config{2, 4, /*sync=*/true}));

// The scratch file is unlinked as soon as it is open, so that nothing is
// left behind even by kill -9 (tests/server/operations_test.cc); a name
// taken by a leftover of an older server is skipped.
TEST(NvmeTierTest, NeverStoredBlocksReadAsZerosAndTheFileIsUnlinkedAtOnce) {
  ScratchDir dir;
  std::ofstream(dir.path() + "/shard.zst") << "left by an older server";
  auto nvme = MakeNvme(dir.path(), 0, 4);
  ASSERT_NE(nvme, nullptr);
  EXPECT_EQ(nvme->path(), dir.path() + "/shard.1.zst");
  EXPECT_FALSE(std::filesystem::exists(nvme->path()));
  auto second = MakeNvme(dir.path(), 0, 4);  // the name is free again
  EXPECT_EQ(second->path(), dir.path() + "/shard.1.zst");
  AlignedBuffer<float> out(kShape.block_floats());
  out.data()[5] = 1;
  ASSERT_TRUE(nvme->Load(7, out.data()).ok());
  EXPECT_EQ(out.data()[5], 0.0f);
  EXPECT_FALSE(nvme->in_place());
}

// Exchange (a confirmed speculative step): the RAM tier takes the buffer
// as the block's state and hands the previous one back, without a copy;
// a buffer of another size, and the NVMe tier, are refused and change nothing.
TEST(NvmeTierTest, OnlyTheRamTierExchangesABlocksState) {
  RamTier ram(kShape);
  AlignedBuffer<float> old_state(kShape.block_floats()), next(kShape.block_floats());
  old_state.data()[3] = 1;
  next.data()[3] = 2;
  ASSERT_TRUE(ram.Store(4, old_state.data()).ok());
  const float* next_memory = next.data();
  ASSERT_TRUE(ram.Exchange(4, next).ok());
  EXPECT_EQ(ram.Resident(4), next_memory);
  EXPECT_EQ(ram.Resident(4)[3], 2.0f);
  EXPECT_EQ(next.data()[3], 1.0f);
  AlignedBuffer<float> wrong(kShape.block_floats() - 1);
  absl::Status s = ram.Exchange(4, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("one block's state"), std::string::npos) << s;
  EXPECT_EQ(ram.Resident(4), next_memory);

  ScratchDir dir;
  auto nvme = MakeNvme(dir.path(), 0, 4);
  ASSERT_NE(nvme, nullptr);
  ASSERT_TRUE(nvme->Store(4, old_state.data()).ok());
  s = nvme->Exchange(4, next);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  AlignedBuffer<float> out(kShape.block_floats());
  ASSERT_TRUE(nvme->Load(4, out.data()).ok());
  EXPECT_EQ(out.data()[3], 1.0f);
  EXPECT_EQ(next.data()[3], 1.0f);
}

TEST(NvmeTierTest, CacheStaysWithinBudgetAndCounts) {
  ScratchDir dir;
  auto sink = std::make_shared<CountingSink>();
  const uint64_t entry = kShape.block_floats() * sizeof(float);
  const uint64_t budget = 3 * entry + entry / 2;
  auto nvme = MakeNvme(dir.path(), budget, 4, sink);
  ASSERT_NE(nvme, nullptr);
  const uint64_t bounce = nvme->ram_bytes();
  EXPECT_EQ(bounce, 4 * nvme->slot_layout().slot_bytes);
  AlignedBuffer<float> buf(kShape.block_floats());
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
    auto init = RandomBlock(kShape, b, 2);
    ASSERT_TRUE(nvme->Store(b, init.data()).ok());
    ASSERT_LE(nvme->cache_bytes(), budget);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t b = 0; b < kShape.num_blocks; ++b) ASSERT_TRUE(nvme->Load(b, buf.data()).ok());
  }
  EXPECT_EQ(nvme->cache_bytes(), 3 * entry);
  EXPECT_LE(nvme->ram_bytes(), budget + bounce + nvme->slot_layout().slot_bytes /* one lane */);
  ASSERT_TRUE(nvme->Load(kShape.num_blocks - 1, buf.data()).ok());  // just used: a hit
  EXPECT_GE(sink->hits.load(), 1u);
  EXPECT_GE(sink->misses.load(), kShape.num_blocks);
  EXPECT_EQ(sink->written.load(), kShape.num_blocks * nvme->slot_layout().slot_bytes);
  EXPECT_EQ(sink->read.load(), sink->misses.load() * nvme->slot_layout().slot_bytes);
}

TEST(NvmeTierTest, PipelineKeepsSeveralRequestsInFlight) {
  ScratchDir dir;
  auto sink = std::make_shared<CountingSink>();
  auto nvme = MakeNvme(dir.path(), 0, 6, sink);
  ASSERT_NE(nvme, nullptr);
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
    ASSERT_TRUE(nvme->Store(b, RandomBlock(kShape, b, 4).data()).ok());
  }
  std::vector<uint64_t> all(kShape.num_blocks);
  for (uint64_t b = 0; b < all.size(); ++b) all[b] = b;
  ThreadPool pool(1);
  ASSERT_TRUE(nvme->Update(all, pool, [](uint64_t, float*) { return true; }, [](uint64_t) {}).ok());
  EXPECT_GE(sink->max_depth.load(), 5);  // reads run ahead of the block being computed
  EXPECT_LE(sink->max_depth.load(), 6);
}

TEST(NvmeTierTest, LoadsOfDifferentBlocksRunConcurrently) {
  ScratchDir dir;
  auto nvme = MakeNvme(dir.path(), 0, 4);
  ASSERT_NE(nvme, nullptr);
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
    ASSERT_TRUE(nvme->Store(b, RandomBlock(kShape, b, 5).data()).ok());
  }
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer<float> out(kShape.block_floats());
      for (uint64_t b = t; b < kShape.num_blocks; b += 4) {
        auto want = RandomBlock(kShape, b, 5);
        if (!nvme->Load(b, out.data()).ok() ||
            FirstMismatch(want.data(), out.data(), out.size()) != -1) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// A gather may Load a block while the step's I/O for it is in flight: it
// must see the state before or after the step, whole.
TEST(NvmeTierTest, LoadDuringUpdateSeesOldOrNewStateNeverAMix) {
  ScratchDir dir;
  const uint64_t entry = kShape.block_floats() * sizeof(float);
  auto nvme = MakeNvme(dir.path(), 4 * entry, 3);
  ASSERT_NE(nvme, nullptr);
  auto step = [](float* s) {
    for (size_t i = 0; i < kShape.block_floats(); ++i) s[i] = s[i] * 0.5f + 1.0f;
  };
  std::vector<uint64_t> all;
  for (uint64_t b = 0; b < kShape.num_blocks; ++b) {
    ASSERT_TRUE(nvme->Store(b, RandomBlock(kShape, b, 6).data()).ok());
    all.push_back(b);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    AlignedBuffer<float> out(kShape.block_floats());
    for (uint64_t b = 0; !stop.load(); b = (b + 5) % kShape.num_blocks) {
      auto old = RandomBlock(kShape, b, 6);
      auto next = RandomBlock(kShape, b, 6);
      step(next.data());
      if (!nvme->Load(b, out.data()).ok() ||
          (FirstMismatch(old.data(), out.data(), out.size()) != -1 &&
           FirstMismatch(next.data(), out.data(), out.size()) != -1)) {
        ++bad;
      }
    }
  });
  ThreadPool pool(1);
  absl::Status s = nvme->Update(all, pool, [&](uint64_t, float* st) { step(st); return true; },
                                [](uint64_t) {});
  stop = true;
  reader.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(bad.load(), 0);
}

TEST(NvmeTierTest, BadOptionsAreRefusedNamingTheField) {
  NvmeTierOptions o;
  auto t = NvmeTier::Create(kShape, o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("nvme_dir"), absl::string_view::npos) << t.status();
  o.dir = "/tmp";
  o.queue_depth = 1;
  t = NvmeTier::Create(kShape, o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("nvme_queue_depth"), absl::string_view::npos) << t.status();
  o.queue_depth = 4;
  t = NvmeTier::Create(TierShape{1, 8, 1}, o);  // 32 bytes: not whole cache lines
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("multiple of 64 bytes"), absl::string_view::npos);
  o.dir = "/tmp/zerostate-no-such-dir/x";
  t = NvmeTier::Create(kShape, o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(t.status().message().find("zerostate-no-such-dir"), absl::string_view::npos);
}

}  // namespace
}  // namespace zerostate::server
