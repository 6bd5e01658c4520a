#include "worker/cpu_backend.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "trainer/bucket_plan.h"

namespace zerostate::worker {
namespace {

constexpr uint64_t kElems = 1000;
const Range kBucket{128, 1000};

// Rank r's gradient element i: chosen so that float sums depend on order.
float Grad(uint32_t r, uint64_t i) { return (r == 0 ? 1e8f : 1.0f) * static_cast<float>(i % 7 + r); }

// Runs the two collectives as local rank `r` of `group`; returns the
// reduce-scatter result.
std::vector<float> RunRank(LocalGroup* group, uint32_t r) {
  CpuBackend backend(group, r, nullptr);
  for (uint64_t i = 0; i < kElems; ++i) group->grads(r)[i] = Grad(r, i);
  Range share = trainer::LocalShare(kBucket, group->size(), r);
  std::vector<float> out(share.size());
  EXPECT_TRUE(backend.ReduceScatter(kBucket, out.data()).ok());
  std::vector<float> weights(share.size());
  for (uint64_t i = 0; i < share.size(); ++i) weights[i] = static_cast<float>(share.begin + i);
  EXPECT_TRUE(backend.AllGather(kBucket, weights.data()).ok());
  std::vector<float> params(kElems);
  EXPECT_TRUE(backend.ReadParams(Range{0, kElems}, params.data()).ok());
  for (uint64_t i = kBucket.begin; i < kBucket.end; ++i) EXPECT_EQ(params[i], float(i)) << "rank " << r;
  for (uint64_t i = 0; i < kBucket.begin; ++i) EXPECT_EQ(params[i], 0.0f);
  return out;
}

void ExpectRankOrderSum(uint32_t ranks, uint32_t r, const std::vector<float>& out) {
  Range share = trainer::LocalShare(kBucket, ranks, r);
  for (uint64_t i = 0; i < share.size(); ++i) {
    float expect = Grad(0, share.begin + i);
    for (uint32_t q = 1; q < ranks; ++q) expect += Grad(q, share.begin + i);
    ASSERT_EQ(out[i], expect) << "rank " << r << " element " << share.begin + i;
  }
}

TEST(CpuBackendTest, ThreadGroupCollectives) {
  const uint32_t ranks = 3;
  auto group = MakeThreadGroup(ranks, kElems);
  std::vector<std::vector<float>> outs(ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) threads.emplace_back([&, r] { outs[r] = RunRank(group.get(), r); });
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < ranks; ++r) ExpectRankOrderSum(ranks, r, outs[r]);
}

TEST(CpuBackendTest, SharedMemoryGroupAcrossProcesses) {
  const std::string name = absl::StrCat("/zerostate-test-", getpid());
  auto owner = OpenShmGroup(name, 2, 0, kElems);
  ASSERT_TRUE(owner.ok()) << owner.status();
  pid_t child = fork();
  if (child == 0) {
    auto g = OpenShmGroup(name, 2, 1, kElems);
    if (!g.ok()) _exit(2);
    auto out = RunRank(g->get(), 1);
    bool ok = !::testing::Test::HasFailure();
    Range share = trainer::LocalShare(kBucket, 2, 1);
    for (uint64_t i = 0; i < share.size(); ++i) ok = ok && out[i] == Grad(0, share.begin + i) + Grad(1, share.begin + i);
    _exit(ok ? 0 : 1);
  }
  auto out = RunRank(owner->get(), 0);
  ExpectRankOrderSum(2, 0, out);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(CpuBackendTest, ShmSizeMismatchIsNamed) {
  const std::string name = absl::StrCat("/zerostate-test-size-", getpid());
  auto owner = OpenShmGroup(name, 2, 0, kElems);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto other = OpenShmGroup(name, 2, 1, kElems + 64);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find(name), std::string::npos) << other.status();
  auto missing = OpenShmGroup(name + "-missing", 2, 1, kElems);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(missing.status().message().find("shm_open"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace zerostate::worker
