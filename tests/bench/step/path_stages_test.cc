// path_floor_bench's stages: the path's bytes per parameter, every piece of
// a stage run once when stages run at once, each stage timed to its own end.
#include "bench/step/path_stages.h"

#include <atomic>
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
  copy.copy = [] { return absl::UnavailableError("cudaMemcpyAsync: no device"); };
  auto r = RunAtOnce({&copy}, {1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cudaMemcpyAsync"), std::string::npos);
}

}  // namespace
}  // namespace zerostate::bench
