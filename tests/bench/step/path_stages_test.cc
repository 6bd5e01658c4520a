// path_floor_bench's stages: the path's bytes per parameter, every piece of
// a stage run once when stages run at once, each stage timed to its own end.
#include "bench/step/path_stages.h"

#include "bench/step/path_schedule.h"

#include <atomic>
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace zerostate::bench {
namespace {

TEST(PathBuffersTest, ItsCpuStagesMoveThePathsBytesPerParameter) {
  // Without the GPU's copies (this build has none): fold, pass, gather.
  for (auto [wire, expected] : {std::pair{v1::DTYPE_BF16, 6.0 + 30 + 4}, {v1::DTYPE_FP32, 8.0 + 28 + 8}}) {
    auto b = PathBuffers::Create(3 * kPieceElems + 5, wire, 2);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->dma_status().code(), absl::StatusCode::kUnavailable);
    double bytes = 0;
    std::vector<std::string> names;
    for (const PathStage& s : (*b)->stages()) {
      bytes += s.bytes_per_param;
      names.push_back(s.name);
      EXPECT_EQ(s.pieces, 4u) << s.name;  // the last piece is the 5 left over
    }
    EXPECT_EQ(names, (std::vector<std::string>{"fold", "pass", "gather"}));
    EXPECT_EQ(bytes, expected) << v1::DType_Name(wire);
    ASSERT_NE((*b)->stage("pass"), nullptr);
    EXPECT_EQ((*b)->stage("d2h"), nullptr);
    // Every stage runs on its buffers, all at once.
    auto run = RunAtOnce({(*b)->stage("fold"), (*b)->stage("pass"), (*b)->stage("gather")}, {1, 1, 1});
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->stage_seconds.size(), 3u);
  }
}

TEST(PathBuffersTest, AWireThePathDoesNotRunIsRefusedNamingIt) {
  auto b = PathBuffers::Create(1024, v1::DTYPE_FP16, 1);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("DTYPE_FP16"), std::string::npos) << b.status();
}

TEST(RunAtOnceTest, EveryPieceRunsOnceAndEachStageIsTimedToItsOwnEnd) {
  std::vector<std::atomic<int>> runs(40);
  PathStage quick, slow;
  quick.name = "quick";
  quick.pieces = 10;
  quick.work = [&](size_t i) { ++runs[i]; };
  slow.name = "slow";
  slow.pieces = 30;
  slow.work = [&](size_t i) {
    ++runs[10 + i];
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  auto r = RunAtOnce({&quick, &slow}, {2, 3});
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << "piece " << i;
  ASSERT_EQ(r->stage_seconds.size(), 2u);
  // 30 pieces of 2 ms on 3 threads: at least 20 ms from the common start.
  EXPECT_GE(r->stage_seconds[1], 0.020);
  EXPECT_LT(r->stage_seconds[0], r->stage_seconds[1]);
  EXPECT_EQ(r->seconds, r->stage_seconds[1]);
}

TEST(RunAtOnceTest, ACopyThatFailsFailsTheRunWithItsError) {
  PathStage copy;
  copy.name = "d2h";
  copy.pieces = 4;
  copy.dma = true;
  copy.copy = [](size_t, size_t) { return absl::UnavailableError("cudaMemcpyAsync: no device"); };
  auto r = RunAtOnce({&copy}, {1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cudaMemcpyAsync"), std::string::npos);
}

// A chain d2h, fold, pass, h2d over 20 pieces that logs what ran when.
struct Logged {
  absl::Mutex mu;
  std::vector<std::pair<size_t, std::string>> log ABSL_GUARDED_BY(mu);  // (piece, stage) in order
  std::vector<std::pair<size_t, size_t>> d2h ABSL_GUARDED_BY(mu), h2d ABSL_GUARDED_BY(mu);
  std::vector<PathStage> stages;

  explicit Logged(size_t pieces) {
    auto cpu = [this, pieces](const char* name) {
      PathStage s;
      s.name = name;
      s.pieces = pieces;
      s.work = [this, name](size_t i) {
        absl::MutexLock lock(&mu);
        log.emplace_back(i, name);
      };
      return s;
    };
    auto dma = [this, pieces](const char* name, std::vector<std::pair<size_t, size_t>>* ranges) {
      PathStage s;
      s.name = name;
      s.pieces = pieces;
      s.dma = true;
      s.copy = [this, name, ranges](size_t b, size_t e) {
        absl::MutexLock lock(&mu);
        ranges->emplace_back(b, e);
        for (size_t i = b; i < e; ++i) log.emplace_back(i, name);
        return absl::OkStatus();
      };
      return s;
    };
    stages = {dma("d2h", &d2h), cpu("fold"), cpu("pass"), dma("h2d", &h2d)};
  }
};

TEST(RunScheduledTest, EveryPieceGoesThroughTheChainInOrderOnce) {
  Logged l(20);
  auto r = RunScheduled(l.stages, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->seconds, 0);
  EXPECT_LE(r->first_seconds, r->seconds);
  absl::MutexLock lock(&l.mu);
  ASSERT_EQ(l.log.size(), 20u * 4);
  for (size_t piece = 0; piece < 20; ++piece) {
    std::vector<std::string> order;
    for (const auto& [i, name] : l.log)
      if (i == piece) order.push_back(name);
    EXPECT_EQ(order, (std::vector<std::string>{"d2h", "fold", "pass", "h2d"})) << "piece " << piece;
  }
  // The gradients leave the last piece first; the weights return the first
  // piece first; each covers every piece once.
  for (size_t k = 1; k < l.d2h.size(); ++k) EXPECT_EQ(l.d2h[k].second, l.d2h[k - 1].first);
  EXPECT_EQ(l.d2h.front().second, 20u);
  EXPECT_EQ(l.d2h.back().first, 0u);
  for (size_t k = 1; k < l.h2d.size(); ++k) EXPECT_EQ(l.h2d[k].first, l.h2d[k - 1].second);
  EXPECT_EQ(l.h2d.front().first, 0u);
  EXPECT_EQ(l.h2d.back().second, 20u);
}

TEST(RunScheduledTest, ABarrierHoldsItsStageUntilEveryPieceIsPastTheOneBefore) {
  Logged l(20);
  auto r = RunScheduled(l.stages, 3, SynchronousBarrier());
  ASSERT_TRUE(r.ok()) << r.status();
  absl::MutexLock lock(&l.mu);
  const auto first_pass = std::find_if(l.log.begin(), l.log.end(), [](const auto& e) { return e.second == "pass"; });
  ASSERT_NE(first_pass, l.log.end());
  EXPECT_EQ(std::count_if(l.log.begin(), first_pass, [](const auto& e) { return e.second == "fold"; }), 20);
  EXPECT_EQ(l.log.size(), 20u * 4);
}

// The speculative step's: the passes run as pieces fold, but no gather
// (here the h2d copy, the stage after the pass) before every fold.
TEST(RunScheduledTest, TheSpeculativeBarrierHoldsTheGathersNotThePasses) {
  Logged l(20);
  l.stages.insert(l.stages.begin() + 3, l.stages[2]);  // a "gather" after the pass
  l.stages[3].name = "gather";
  l.stages[3].work = [&l](size_t i) {
    absl::MutexLock lock(&l.mu);
    l.log.emplace_back(i, "gather");
  };
  // One CPU thread: the lowest piece the last copy brings is folded, then
  // stepped before the pieces above it are folded, whatever the timing.
  auto r = RunScheduled(l.stages, 1, SpeculativeBarrier());
  ASSERT_TRUE(r.ok()) << r.status();
  absl::MutexLock lock(&l.mu);
  ASSERT_EQ(l.log.size(), 20u * 5);
  auto first = [&](const char* stage) {
    return std::find_if(l.log.begin(), l.log.end(), [&](const auto& e) { return e.second == stage; });
  };
  EXPECT_EQ(std::count_if(l.log.begin(), first("gather"), [](const auto& e) { return e.second == "fold"; }), 20);
  // Passes run before the last fold (the barrier does not hold them).
  const auto last_fold = std::find_if(l.log.rbegin(), l.log.rend(), [](const auto& e) { return e.second == "fold"; });
  EXPECT_LT(first("pass"), last_fold.base());
}

TEST(RunScheduledTest, ABarrierOnAStageTheChainLacksIsRefusedByName) {
  Logged l(4);
  auto r = RunScheduled(l.stages, 2, SpeculativeBarrier());  // no "gather" in this chain
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("gather"), std::string::npos) << r.status();
  r = RunScheduled(l.stages, 2, Barrier{"fold", "pass"});  // the wrong order
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RunScheduledTest, ACopyThatFailsEndsTheRunWithItsError) {
  Logged l(20);
  l.stages.front().copy = [](size_t, size_t) { return absl::InternalError("d2h: device lost"); };
  auto r = RunScheduled(l.stages, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("device lost"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace zerostate::bench
