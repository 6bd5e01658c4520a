// More gathers waiting for a version than the client has pool threads must
// not keep the Step that brings that version from running (it once did: the
// Step's per-server calls queued behind the waiting gathers).
#include <gtest/gtest.h>

#include <vector>

#include "client/client.h"
#include "tests/client/cluster_fixture.h"

namespace zerostate::testing {
namespace {

TEST(ClientPoolTest, StepRunsWhileMoreGathersWaitThanPoolThreads) {
  auto cluster = ServerCluster::Start(2, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  options.threads = 2;
  auto c = client::Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  auto job = (*c)->RegisterJob(TestSpec("pool", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  std::vector<float> g(layout.used_elems, 0.5f), w(layout.used_elems);
  std::vector<client::Ticket> waiting;
  for (int i = 0; i < 8; ++i) {  // 8 gathers x several streams >> 2 pool threads
    waiting.push_back((*job)->GatherAsync(1, Range{0, w.size()}, w.data(), v1::DTYPE_FP32));
  }
  ASSERT_TRUE((*job)->Push(0, 0, Range{0, g.size()}, g.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE((*job)->Step(0, 0.1f, 1.0f, false).ok());
  for (auto& t : waiting) EXPECT_TRUE(t.Wait().ok());
  EXPECT_EQ(*(*job)->Version(), 1u);
}

}  // namespace
}  // namespace zerostate::testing
