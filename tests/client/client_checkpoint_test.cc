// Checkpoint and restore through the client and real server processes: a
// job trained on S servers, checkpointed while it trains, restored onto S'
// servers (1 -> 3 and 3 -> 2), continues bit-identical to the original.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "client/client.h"
#include "tests/client/cluster_fixture.h"

namespace zerostate::testing {
namespace {

struct Trained {
  std::unique_ptr<ServerCluster> servers;
  std::unique_ptr<client::Client> client;
  std::unique_ptr<client::JobClient> job;
};

Trained StartCluster(int n) {
  Trained t;
  auto cluster = ServerCluster::Start(n, TestServerOptions());
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  t.servers = *std::move(cluster);
  auto c = client::Client::Connect(TestClientOptions(t.servers->addresses()));
  EXPECT_TRUE(c.ok()) << c.status();
  t.client = *std::move(c);
  return t;
}

// One step: both nodes push a gradient that depends on (step, node, element).
void Step(client::JobClient& job, uint64_t step) {
  const Layout& layout = job.layout();
  std::vector<float> g(layout.used_elems);
  for (uint32_t node = 0; node < 2; ++node) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.01f * i + step + 3.0f * node);
    ASSERT_TRUE(job.Push(step, node, Range{0, g.size()}, g.data(), v1::DTYPE_FP32).ok());
  }
  ASSERT_TRUE(job.Step(step, 1e-2f, 0.5f, false).ok());
}

std::vector<float> Master(client::JobClient& job, uint64_t version) {
  std::vector<float> w(job.layout().used_elems);
  EXPECT_TRUE(job.GatherMaster(version, Range{0, w.size()}, w.data()).ok());
  return w;
}

class ClientCheckpointTest : public ::testing::TestWithParam<std::pair<int, int>> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/zs-client-ckpt-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_;
};

TEST_P(ClientCheckpointTest, RestoreOntoAnotherServerCountContinuesBitIdentical) {
  auto [from, to] = GetParam();
  Trained a = StartCluster(from);
  auto job = a.client->RegisterJob(TestSpec("ck", 2, v1::DTYPE_FP32, v1::DTYPE_BF16));
  ASSERT_TRUE(job.ok()) << job.status();
  a.job = *std::move(job);
  Step(*a.job, 0);
  Step(*a.job, 1);
  auto path = a.job->Checkpoint(2, root_);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, root_ + "/ck/v2");

  Trained b = StartCluster(to);
  auto restored = b.client->RestoreJob(*path);
  ASSERT_TRUE(restored.ok()) << restored.status();
  b.job = *std::move(restored);
  EXPECT_EQ(*b.job->Version(), 2u);
  auto wa = Master(*a.job, 2), wb = Master(*b.job, 2);
  ExpectBitIdentical(wb.data(), wa.data(), wa.size(), "restored weights");
  Step(*a.job, 2);
  Step(*b.job, 2);
  wa = Master(*a.job, 3);
  wb = Master(*b.job, 3);
  ExpectBitIdentical(wb.data(), wa.data(), wa.size(), "weights one step after the restore");
}

INSTANTIATE_TEST_SUITE_P(ServerCounts, ClientCheckpointTest,
                         ::testing::Values(std::pair{1, 3}, std::pair{3, 2}));

TEST(ClientCheckpointErrorsTest, BadArgumentsAreRefusedBeforeSending) {
  auto c = client::Client::Connect(TestClientOptions({"127.0.0.1:1"}));
  ASSERT_TRUE(c.ok());
  auto r = (*c)->RestoreJob("");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("path"), std::string::npos);
}

}  // namespace
}  // namespace zerostate::testing
