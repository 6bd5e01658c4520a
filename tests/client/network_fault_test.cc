// Network faults between a trainer and real servers: every connection of
// the client goes through a FaultProxy (tests/testing/fault_proxy.h) in
// front of each of 2 real zerostate-server processes. Connections are cut
// mid-push, mid-step and mid-gather, delayed past the RPC deadline, and
// black-holed; the client retries. Exactly once: every step's gathered
// weights and the final fp32 masters equal a single-process reference bit
// for bit (a push applied twice would double a gradient, a lost one would
// leave it out), the job's version equals the number of steps, and the
// client's retry counters show the faults were hit. Each fault runs three
// times: push and gather over gRPC, over the servers' TCP data plane (its
// connections through FaultProxies of their own), and over the data plane
// under mutual TLS on both ports (a cut then lands inside a TLS record).
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <tuple>

#include "prometheus/registry.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"
#include "tests/testing/fault_proxy.h"

namespace zerostate::testing {
namespace {

using Dir = FaultProxy::Direction;
constexpr uint64_t kSteps = 4;
constexpr uint64_t kFaultStep = 1;  // the step whose calls meet the fault
constexpr uint32_t kNodes = 2;

// Retries the client counted for `method` ("PushGradients", "Step", ...).
double Retries(prometheus::Registry& registry, const std::string& method) {
  double total = 0;
  for (const auto& family : registry.Collect()) {
    if (family.name != "zerostate_client_retries_total") continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.value == method) total += m.counter.value;
      }
    }
  }
  return total;
}

// The phase of a step in which a fault is injected.
enum class Phase { kPush, kStep, kGather };

struct Fault {
  const char* name;
  Phase phase;
  const char* retried;  // the method whose retries must show
  // Injects the fault on the proxies (before the phase's calls start);
  // returns what to do once they started (may be empty).
  std::function<std::function<void()>(std::vector<std::unique_ptr<FaultProxy>>&)> inject;
};

// Where push and gather go.
enum class Plane { kGrpc, kTcp, kTcpTls };

// A fault, and the plane of push and gather.
using FaultParam = std::tuple<Fault, Plane>;

// A FaultProxy in front of `target`; its address is appended to `through`.
void AddProxy(const std::string& target, std::vector<std::unique_ptr<FaultProxy>>* proxies,
              std::vector<std::string>* through) {
  auto proxy = FaultProxy::Start(target);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  through->push_back((*proxy)->address());
  proxies->push_back(*std::move(proxy));
}

class NetworkFaultTest : public ::testing::TestWithParam<FaultParam> {
 protected:
  void SetUp() override {
    ServerProcessOptions server_options = TestServerOptions();
    if (tls()) {
      ASSERT_TRUE(SharedCertificates().ok()) << SharedCertificates().Log();
      UseMutualTls(server_options);
    }
    auto cluster = ServerCluster::Start(2, server_options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    std::vector<std::string> through, data_through;
    for (int i = 0; i < cluster_->size(); ++i) {
      AddProxy(cluster_->server(i).address(), &proxies_, &through);
      if (data_plane()) AddProxy(cluster_->server(i).data_address(), &data_proxies_, &data_through);
    }
    client::ClientOptions options = TestClientOptions(through);
    options.data_plane = data_plane();
    options.data_servers = data_through;
    options.rpc_timeout = std::chrono::milliseconds(500);
    options.max_attempts = 40;  // rides out a fault of several seconds
    options.initial_backoff = std::chrono::milliseconds(10);
    options.max_backoff = std::chrono::milliseconds(100);
    options.metrics = registry_;
    if (tls()) UseMutualTls(options);
    auto client = client::Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  bool data_plane() const { return std::get<1>(GetParam()) != Plane::kGrpc; }
  bool tls() const { return std::get<1>(GetParam()) == Plane::kTcpTls; }

  // The proxies a fault in `phase` acts on: the data plane's for push and
  // gather when the client uses it.
  std::vector<std::unique_ptr<FaultProxy>>& ProxiesOf(Phase phase) {
    return data_plane() && phase != Phase::kStep ? data_proxies_ : proxies_;
  }

  void TearDown() override {
    proxies_.clear();  // before the servers: no connection outlives its target
    data_proxies_.clear();
    if (cluster_) { EXPECT_TRUE(cluster_->StopAll().ok()); }
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::vector<std::unique_ptr<FaultProxy>> proxies_;
  std::vector<std::unique_ptr<FaultProxy>> data_proxies_;  // empty over gRPC
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<client::Client> client_;
};

TEST_P(NetworkFaultTest, RetriesKeepEveryStepExactlyOnce) {
  const Fault& fault = std::get<0>(GetParam());
  auto job = client_->RegisterJob(TestSpec(fault.name, kNodes, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const Layout& layout = ref.layout();
  std::vector<float> got(layout.total_elems);
  for (uint64_t step = 0; step < kSteps; ++step) {
    const float lr = 0.01f * static_cast<float>(step + 1);
    std::function<void()> during;
    auto inject = [&](Phase phase) {
      if (step == kFaultStep && fault.phase == phase) during = fault.inject(ProxiesOf(phase));
    };
    auto started = [&] {
      if (during) during();
      during = nullptr;
    };
    std::vector<std::vector<float>> grads;
    std::vector<client::Ticket> pushes;
    inject(Phase::kPush);
    for (uint32_t node = 0; node < kNodes; ++node) {
      grads.push_back(NodeGradient(layout, node, step));
      pushes.push_back((*job)->PushAsync(step, node, {0, layout.used_elems}, grads.back().data(),
                                         v1::DTYPE_FP32));
    }
    started();
    for (auto& t : pushes) ASSERT_TRUE(t.Wait().ok()) << "step " << step << ": " << t.Wait();

    inject(Phase::kStep);
    absl::Status stepped;
    std::thread step_call([&] { stepped = (*job)->Step(step, lr, 1.0f, false); });
    started();
    step_call.join();
    ASSERT_TRUE(stepped.ok()) << "step " << step << ": " << stepped;
    ref.Step(step, grads, lr, 1.0f);

    inject(Phase::kGather);
    client::Ticket gather = (*job)->GatherAsync(step + 1, {0, got.size()}, got.data(), v1::DTYPE_FP32);
    started();
    ASSERT_TRUE(gather.Wait().ok()) << "step " << step << ": " << gather.Wait();
    ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(),
                       "weights after step " + std::to_string(step));
  }
  for (auto& p : proxies_) p->SetDelay(absl::ZeroDuration());
  for (auto& p : data_proxies_) p->SetDelay(absl::ZeroDuration());
  auto version = (*job)->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, kSteps) << "a step was applied more or less than once";
  ASSERT_TRUE((*job)->GatherMaster(kSteps, {0, got.size()}, got.data()).ok());
  ExpectBitIdentical(got.data(), ref.master(), got.size(), "final fp32 masters");
  EXPECT_GT(Retries(*registry_, fault.retried), 0) << "the fault was never hit";
}

// Releases what `proxy` holds or delays after a while, from a thread of
// its own, so the client's attempts meet the fault first. Returns the
// "during" hook that waits for the release.
std::function<void()> ReleaseLater(FaultProxy* proxy, absl::Duration after) {
  return [proxy, after] {
    absl::SleepFor(after);
    proxy->SetBlackHole(false);
    proxy->SetDelay(absl::ZeroDuration());
  };
}

INSTANTIATE_TEST_SUITE_P(
    Faults, NetworkFaultTest,
    ::testing::Combine(::testing::Values(
        // Server 0's connections reset after 3000 more bytes of push data.
        Fault{"cut_mid_push", Phase::kPush, "PushGradients",
              [](auto& proxies) {
                proxies[0]->CutAfter(Dir::kToTarget, 3000);
                return std::function<void()>();
              }},
        // Server 1's connections reset after 2000 bytes of gathered data.
        Fault{"cut_mid_gather", Phase::kGather, "Gather",
              [](auto& proxies) {
                proxies[1]->CutAfter(Dir::kToClient, 2000);
                return std::function<void()>();
              }},
        // The Step reaches server 0 and is applied; its answer, held by a
        // delay, is lost in a reset: the retry must not step again.
        Fault{"cut_mid_step", Phase::kStep, "Step",
              [](auto& proxies) {
                proxies[0]->SetDelay(absl::Milliseconds(150));
                FaultProxy* p = proxies[0].get();
                return std::function<void()>([p] {
                  absl::SleepFor(absl::Milliseconds(200));
                  p->CutAll(FaultProxy::CutMode::kReset);
                  p->SetDelay(absl::ZeroDuration());
                });
              }},
        // Every byte to and from server 1 arrives 700 ms late, past the
        // 500 ms deadline, for 2 s: pushes time out after the server
        // already has (part of) them.
        Fault{"delay_past_deadline_push", Phase::kPush, "PushGradients",
              [](auto& proxies) {
                proxies[1]->SetDelay(absl::Milliseconds(700));
                return ReleaseLater(proxies[1].get(), absl::Seconds(2));
              }},
        Fault{"delay_past_deadline_step", Phase::kStep, "Step",
              [](auto& proxies) {
                proxies[1]->SetDelay(absl::Milliseconds(700));
                return ReleaseLater(proxies[1].get(), absl::Seconds(2));
              }},
        // Server 0 black-holed for 2 s mid-push: accepted, nothing through.
        Fault{"black_hole_push", Phase::kPush, "PushGradients",
              [](auto& proxies) {
                proxies[0]->SetBlackHole(true);
                return ReleaseLater(proxies[0].get(), absl::Seconds(2));
              }}),
        ::testing::Values(Plane::kGrpc, Plane::kTcp, Plane::kTcpTls)),
    [](const auto& info) {
      const Plane plane = std::get<1>(info.param);
      return std::string(std::get<0>(info.param).name) +
             (plane == Plane::kGrpc ? "_grpc" : plane == Plane::kTcp ? "_tcp" : "_tcp_tls");
    });

}  // namespace
}  // namespace zerostate::testing
