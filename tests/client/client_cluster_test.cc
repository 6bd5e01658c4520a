// The client against real zerostate-server processes: several nodes push
// concurrently to 1, 2 or 3 servers, and the weights they gather equal a
// single-process reference bit for bit, over gRPC and over the servers' TCP
// data plane.
#include <thread>

#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

struct Param {
  int servers;
  v1::DType grad;
  v1::DType weight;
  bool data_plane;  // push and gather over the TCP data plane, else gRPC
};

class ClientClusterTest : public ::testing::TestWithParam<Param> {};

// Node `node`'s part of one step: push its gradient as two halves (two
// local ranks) at once, then wait.
void PushNode(client::JobClient& job, uint32_t node, uint64_t step) {
  const Layout& layout = job.layout();
  std::vector<float> g = NodeGradient(layout, node, step);
  uint64_t half = layout.used_elems / 2 + 17;
  client::Ticket a = job.PushAsync(step, node, {0, half}, g.data(), v1::DTYPE_FP32);
  client::Ticket b =
      job.PushAsync(step, node, {half, layout.used_elems}, g.data() + half, v1::DTYPE_FP32);
  EXPECT_TRUE(a.Wait().ok()) << a.Wait();
  EXPECT_TRUE(b.Wait().ok()) << b.Wait();
}

TEST_P(ClientClusterTest, NodesPushConcurrentlyAndGatherTheReferenceBits) {
  const Param p = GetParam();
  constexpr uint32_t kNodes = 3;
  constexpr int kSteps = 3;
  auto cluster = ServerCluster::Start(p.servers, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  options.data_plane = p.data_plane;
  v1::JobSpec spec = TestSpec("cluster", kNodes, p.grad, p.weight);

  // Node 0 registers; the other nodes attach with their own clients.
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::JobClient>> jobs;
  for (uint32_t n = 0; n < kNodes; ++n) {
    auto c = client::Client::Connect(options);
    ASSERT_TRUE(c.ok()) << c.status();
    auto j = n == 0 ? (*c)->RegisterJob(spec) : (*c)->AttachJob("cluster");
    ASSERT_TRUE(j.ok()) << j.status();
    clients.push_back(*std::move(c));
    jobs.push_back(*std::move(j));
  }
  ReferenceModel ref(jobs[0]->spec());
  const uint64_t total = ref.layout().total_elems;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::thread> nodes;
    for (uint32_t n = 0; n < kNodes; ++n) nodes.emplace_back(PushNode, std::ref(*jobs[n]), n, step);
    for (auto& t : nodes) t.join();
    auto stats = jobs[0]->GradStats(step);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->nonfinite_count, 0u);
    EXPECT_GT(stats->sum_squares, 0);
    float lr = 0.01f * (step + 1), scale = 1.0f / kNodes;
    ASSERT_TRUE(jobs[0]->Step(step, lr, scale, false).ok());
    std::vector<std::vector<float>> grads;
    for (uint32_t n = 0; n < kNodes; ++n) grads.push_back(NodeGradient(ref.layout(), n, step));
    ref.Step(step, grads, lr, scale);
  }
  std::vector<float> want = ref.GatheredWeights();
  for (uint32_t n = 0; n < kNodes; ++n) {
    std::vector<float> got(total, -1.0f);
    ASSERT_TRUE(jobs[n]->Gather(kSteps, {0, total}, got.data(), v1::DTYPE_FP32).ok());
    ExpectBitIdentical(got.data(), want.data(), total, "gathered weights");
  }
  std::vector<float> master(total);
  ASSERT_TRUE(jobs[1]->GatherMaster(kSteps, {0, total}, master.data()).ok());
  ExpectBitIdentical(master.data(), ref.master(), total, "master weights");
  auto version = jobs[2]->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, static_cast<uint64_t>(kSteps));
}

INSTANTIATE_TEST_SUITE_P(
    Servers, ClientClusterTest,
    ::testing::Values(Param{1, v1::DTYPE_FP32, v1::DTYPE_FP32, false},
                      Param{2, v1::DTYPE_BF16, v1::DTYPE_BF16, false},
                      Param{3, v1::DTYPE_FP32, v1::DTYPE_BF16, false},
                      Param{3, v1::DTYPE_BF16, v1::DTYPE_FP16, false},
                      Param{1, v1::DTYPE_FP32, v1::DTYPE_FP32, true},
                      Param{2, v1::DTYPE_BF16, v1::DTYPE_BF16, true},
                      Param{3, v1::DTYPE_FP32, v1::DTYPE_BF16, true},
                      Param{3, v1::DTYPE_BF16, v1::DTYPE_FP16, true}),
    [](const auto& info) {
      return std::to_string(info.param.servers) + "servers_grad" +
             DTypeName(info.param.grad) + "_weight" + DTypeName(info.param.weight) +
             (info.param.data_plane ? "_tcp" : "_grpc");
    });

}  // namespace
}  // namespace zerostate::testing
