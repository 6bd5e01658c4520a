// The client's other calls against a real server: streamed initial
// weights, rendezvous, metrics.
#include <thread>

#include "common/init.h"
#include "prometheus/registry.h"
#include "tests/client/cluster_fixture.h"

namespace zerostate::testing {
namespace {

double Counter(prometheus::Registry& r, const std::string& name) {
  double total = 0;
  for (const auto& family : r.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) total += m.counter.value;
  }
  return total;
}

TEST(ClientCallsTest, StreamedInitialWeightsAreServedBack) {
  auto cluster = ServerCluster::Start(2, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  options.metrics = std::make_shared<prometheus::Registry>();
  auto c = client::Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::JobSpec spec = TestSpec("init", 1, v1::DTYPE_FP32, v1::DTYPE_BF16);
  spec.set_streamed_init(true);
  auto job = (*c)->RegisterJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  std::vector<float> w(layout.total_elems);
  FillInitialWeights(layout, 99, {0, layout.total_elems}, w.data());
  ASSERT_TRUE((*job)->InitWeights({0, layout.used_elems}, w.data()).ok());
  std::vector<float> got(layout.total_elems, -1.0f);
  ASSERT_TRUE((*job)->GatherMaster(0, {0, layout.total_elems}, got.data()).ok());
  ExpectBitIdentical(got.data(), w.data(), got.size(), "initial weights");
  EXPECT_EQ(Counter(*options.metrics, "zerostate_client_bytes_sent_total"),
            layout.used_elems * 4.0);
  EXPECT_EQ(Counter(*options.metrics, "zerostate_client_bytes_received_total"),
            layout.total_elems * 4.0);
}

TEST(ClientCallsTest, RendezvousGathersEveryRanksValue) {
  auto server = ServerProcess::Start(TestServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = client::Client::Connect(TestClientOptions({(*server)->address()}));
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<absl::StatusOr<std::vector<std::string>>> got(3);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] { got[r] = (*c)->Rendezvous("ns", "ids", r, 3, "v" + std::to_string(r)); });
  }
  for (auto& t : ranks) t.join();
  for (const auto& values : got) {
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_EQ(*values, (std::vector<std::string>{"v0", "v1", "v2"}));
  }
}

// With more servers than blocks some servers hold nothing of the job; the
// job's version is that of the servers that hold its blocks.
TEST(ClientCallsTest, VersionIgnoresServersWithoutBlocks) {
  auto cluster = ServerCluster::Start(3, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto c = client::Client::Connect(TestClientOptions((*cluster)->addresses()));
  ASSERT_TRUE(c.ok()) << c.status();
  v1::JobSpec spec = TestSpec("fewblocks", 1, v1::DTYPE_FP32, v1::DTYPE_FP32);
  spec.mutable_tensors()->DeleteSubrange(1, 2);  // 37 x 61: 5 blocks of 512
  spec.set_block_elems(4096);                     // 1 block, on server 0 only
  auto job = (*c)->RegisterJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  ASSERT_EQ(layout.num_blocks(), 1u);
  std::vector<float> g(layout.used_elems, 0.25f);
  ASSERT_TRUE((*job)->Push(0, 0, Range{0, g.size()}, g.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE((*job)->Step(0, 0.1f, 1.0f, false).ok());
  auto version = (*job)->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1u);
}

TEST(ClientCallsTest, UnknownTensorIsNamed) {
  auto server = ServerProcess::Start(TestServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = client::Client::Connect(TestClientOptions({(*server)->address()}));
  ASSERT_TRUE(c.ok()) << c.status();
  auto job = (*c)->RegisterJob(TestSpec("names", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  auto range = (*job)->TensorRange("t1");
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->size(), 1000u);
  auto missing = (*job)->TensorRange("t9");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'t9'"), absl::string_view::npos);
}

}  // namespace
}  // namespace zerostate::testing
