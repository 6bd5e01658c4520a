// The gradient staging budget against real server processes: three nodes
// (each its own client, as trainer processes are) push a step's gradients
// in reverse order to a server whose --staging_budget_bytes holds one
// staging buffer, so the early nodes' pushes wait on the server for memory
// or their turn; the weights after two steps are bit-identical to those of
// a server with the default budget. Over gRPC and over the TCP data plane.
// And --staging_budget_bytes values the server refuses at start.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

constexpr uint32_t kNodes = 3;
constexpr uint64_t kSteps = 2;
// TestSpec's blocks are 512 fp32 elements: exactly one staging buffer.
constexpr char kOneBuffer[] = "--staging_budget_bytes=2048";

double Metric(const ServerProcess& server, const std::string& name) {
  auto page = ScrapeMetrics(server.metrics_address());
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? MetricValue(*page, name) : -1;
}

class StagingBudgetProcessTest : public ::testing::TestWithParam<bool> {
 protected:
  // Runs kSteps steps on `server`, each node's gradient pushed in reverse
  // node order; returns the master weights. With `await_waits`, node 0
  // pushes only once the server counts a push waiting for staging memory,
  // so the budget is certainly exercised.
  std::vector<float> Train(const ServerProcess& server, bool await_waits) {
    std::vector<std::unique_ptr<client::Client>> clients;
    std::vector<std::unique_ptr<client::JobClient>> jobs;
    for (uint32_t n = 0; n < kNodes; ++n) {
      client::ClientOptions o = TestClientOptions({server.address()});
      o.data_plane = GetParam();
      auto c = client::Client::Connect(o);
      EXPECT_TRUE(c.ok()) << c.status();
      if (!c.ok()) return {};
      auto job = (*c)->RegisterJob(TestSpec("staging", kNodes, v1::DTYPE_FP32, v1::DTYPE_FP32));
      EXPECT_TRUE(job.ok()) << job.status();
      if (!job.ok()) return {};
      clients.push_back(*std::move(c));
      jobs.push_back(*std::move(job));
    }
    const Layout& layout = jobs[0]->layout();
    const Range all{0, layout.used_elems};
    for (uint64_t step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> grads;
      for (uint32_t n = 0; n < kNodes; ++n) grads.push_back(NodeGradient(layout, n, step));
      const double waits = await_waits ? Metric(server, "zerostate_staging_waits_total") : 0;
      std::vector<client::Ticket> tickets;
      for (uint32_t n = kNodes - 1; n > 0; --n) {
        tickets.push_back(jobs[n]->PushAsync(step, n, all, grads[n].data(), v1::DTYPE_FP32));
      }
      // Waits for the server to hold an early push back (no time limit:
      // the test's timeout is the backstop).
      while (await_waits && Metric(server, "zerostate_staging_waits_total") <= waits) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      EXPECT_TRUE(jobs[0]->Push(step, 0, all, grads[0].data(), v1::DTYPE_FP32).ok());
      for (auto& t : tickets) {
        absl::Status s = t.Wait();
        EXPECT_TRUE(s.ok()) << s;
      }
      absl::Status stepped = jobs[0]->Step(step, 0.01f, 1.0f, false);
      EXPECT_TRUE(stepped.ok()) << stepped;
    }
    std::vector<float> w(layout.total_elems);
    absl::Status gathered = jobs[0]->GatherMaster(kSteps, {0, w.size()}, w.data());
    EXPECT_TRUE(gathered.ok()) << gathered;
    return w;
  }
};

TEST_P(StagingBudgetProcessTest, ReverseOrderPushesWithATinyBudgetGiveTheSameWeights) {
  ServerProcessOptions tiny_opt = TestServerOptions();
  tiny_opt.args.push_back(kOneBuffer);
  tiny_opt.args.push_back("--metrics_listen=127.0.0.1:0");
  auto tiny = ServerProcess::Start(tiny_opt);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  ServerProcessOptions large_opt = TestServerOptions();
  large_opt.args.push_back("--metrics_listen=127.0.0.1:0");
  auto large = ServerProcess::Start(large_opt);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(Metric(**tiny, "zerostate_staging_budget_bytes"), 2048);
  // The default: an eighth of TestServerOptions' --ram_budget_bytes=200000000.
  EXPECT_EQ(Metric(**large, "zerostate_staging_budget_bytes"), 25000000);

  const std::vector<float> got = Train(**tiny, /*await_waits=*/true);
  const std::vector<float> want = Train(**large, /*await_waits=*/false);
  ASSERT_EQ(got.size(), want.size());
  ExpectBitIdentical(got.data(), want.data(), got.size(), "weights");
  EXPECT_EQ(Metric(**tiny, "zerostate_staging_used_bytes"), 0);  // all folded
}

INSTANTIATE_TEST_SUITE_P(Transports, StagingBudgetProcessTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "DataPlane" : "Grpc"; });

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StagingBudgetFlagTest, BadValuesAreRefusedNamingTheFlag) {
  const std::vector<std::string> bad = {"--staging_budget_bytes=-1",
                                        "--staging_budget_bytes=lots",
                                        "--staging_budget_bytes=200000001"};
  for (const std::string& flag : bad) {
    char path[] = "/tmp/zs-staging-flag-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back(flag);
    o.stderr_path = path;
    auto server = ServerProcess::Start(o);
    EXPECT_FALSE(server.ok()) << flag << " was accepted";
    const std::string log = ReadFile(path);
    unlink(path);
    EXPECT_NE(log.find("staging_budget_bytes"), std::string::npos) << flag << ": " << log;
  }
}

}  // namespace
}  // namespace zerostate::testing
