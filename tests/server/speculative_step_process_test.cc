// The speculative step (JobSpec.speculative_step, StepRequest.ahead)
// against real server processes: two servers hold two jobs of the same
// spec, one plain and one speculative; two nodes (each its own client)
// push the same gradients to both. After steps that confirm the
// speculation, clip, overflow (fp16 gradients holding an Inf: the step is
// skipped), with nodes pushing out of order, with pushes, Steps sent ahead
// and Steps repeated after their answers were dropped (a proxy cuts the
// connections) and with a Step that expired during the speculation, every
// block's weights and both moments (read from a checkpoint of each job)
// and the fp16 copy are bit-identical to the plain job's.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "server/core/checkpoint/checkpoint_reader.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"
#include "tests/testing/fault_proxy.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::testing {
namespace {

constexpr uint32_t kNodes = 2;
constexpr float kLr = 1e-2f;
// What the coordinator's Step carries when nothing is clipped: 1/(nodes).
constexpr float kScale = 0.5f;

v1::JobSpec Spec(bool speculative) {
  v1::JobSpec spec =
      TestSpec(speculative ? "spec" : "plain", kNodes, v1::DTYPE_FP16, v1::DTYPE_FP16);
  spec.set_speculative_step(speculative);
  return spec;
}

class SpeculativeStepProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--threads=2");
    auto cluster = ServerCluster::Start(2, o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    root_ = std::filesystem::temp_directory_path() /
            ("zs-speculative-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // One node's handle on a job: its own client, as a trainer process has.
  struct Node {
    std::unique_ptr<client::Client> client;
    std::unique_ptr<client::JobClient> job;
  };
  Node Open(const v1::JobSpec& spec, const std::vector<std::string>& servers) {
    client::ClientOptions o = TestClientOptions(servers);
    o.data_plane = false;  // the proxies below carry gRPC only
    o.data_shm = false;
    o.max_attempts = 40;  // rides out the proxy's cuts and gRPC's reconnect backoff
    o.max_backoff = std::chrono::milliseconds(100);
    auto c = client::Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    auto job = (*c)->RegisterJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return Node{*std::move(c), *std::move(job)};
  }

  // Node `node`'s gradient of `step`, with an Inf in it when `overflow`.
  static std::vector<float> Gradient(const Layout& layout, uint32_t node, uint64_t step,
                                     bool overflow) {
    std::vector<float> g = NodeGradient(layout, node, step);
    if (overflow) g[layout.used_elems / 2] = INFINITY;
    return g;
  }

  // Pushes `g` in pieces of `piece` elements, last piece first.
  static void PushBackwards(client::JobClient& job, uint64_t step, uint32_t node,
                            const std::vector<float>& g, uint64_t piece) {
    const uint64_t n = job.layout().used_elems;
    std::vector<client::Ticket> tickets;
    for (uint64_t end = n; end > 0;) {
      const uint64_t begin = end > piece ? end - piece : 0;
      tickets.push_back(job.PushAsync(step, node, {begin, end}, g.data() + begin, v1::DTYPE_FP32));
      end = begin;
    }
    for (auto& t : tickets) {
      absl::Status s = t.Wait();
      EXPECT_TRUE(s.ok()) << s;
    }
  }

  // Blocks of `job_id` stepped speculatively, over every server.
  uint64_t Speculated(const std::string& job_id) {
    uint64_t total = 0;
    for (const std::string& address : cluster_->addresses()) {
      auto stub = v1::StateService::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.AddMetadata("zerostate-job-token", kTestJobToken);
      v1::JobStatusRequest req;
      req.set_job_id(job_id);
      v1::JobStatusResponse resp;
      grpc::Status s = stub->JobStatus(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      total += resp.blocks_speculated();
    }
    return total;
  }
  // Until every block of the speculative job is stepped speculatively.
  void AwaitSpeculation(uint64_t blocks) {
    while (Speculated("spec") < blocks) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  // Both jobs at `version`: every block's state (weights, m, v) from a
  // checkpoint of each, the fp32 masters and the fp16 copy, bit for bit.
  void ExpectSame(client::JobClient& plain, client::JobClient& spec, uint64_t version) {
    auto a = plain.Checkpoint(version, root_.string());
    auto b = spec.Checkpoint(version, root_.string());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    auto want = server::CheckpointReader::Open(*a);
    auto got = server::CheckpointReader::Open(*b);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)->manifests()[0].applied_steps(), (*want)->manifests()[0].applied_steps());
    const size_t floats = (*want)->block_floats();
    std::vector<float> x(floats), y(floats);
    for (uint64_t blk = 0; blk < (*want)->layout().num_blocks(); ++blk) {
      ASSERT_TRUE((*want)->ReadBlock(blk, x.data()).ok());
      ASSERT_TRUE((*got)->ReadBlock(blk, y.data()).ok());
      ExpectBitIdentical(y.data(), x.data(), floats, "state of block " + std::to_string(blk));
    }
    const Range all{0, plain.layout().used_elems};
    std::vector<uint16_t> lp(all.size()), ls(all.size());
    ASSERT_TRUE(plain.Gather(version, all, lp.data(), v1::DTYPE_FP16).ok());
    ASSERT_TRUE(spec.Gather(version, all, ls.data(), v1::DTYPE_FP16).ok());
    EXPECT_EQ(ls, lp) << "fp16 copy at version " << version;
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::filesystem::path root_;
};

// Five steps: confirmed (parameters ahead of the pushes), confirmed
// (parameters after them, nodes in reverse order), clipped, overflowed
// (skipped), confirmed; the last one's bias correction counts four
// applied steps.
TEST_F(SpeculativeStepProcessTest, EveryOutcomeIsBitIdenticalToThePlainStep) {
  std::vector<Node> plain, spec;
  for (uint32_t n = 0; n < kNodes; ++n) {
    plain.push_back(Open(Spec(false), cluster_->addresses()));
    spec.push_back(Open(Spec(true), cluster_->addresses()));
  }
  const Layout& layout = plain[0].job->layout();
  for (uint64_t step = 0; step < 5; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const bool overflow = step == 3;
    const float final_scale = step == 2 ? kScale * 0.25f : kScale;  // step 2 clips
    if (step != 1) { ASSERT_TRUE(spec[0].job->StepAhead(step, kLr, kScale).ok()); }
    for (uint32_t i = 0; i < kNodes; ++i) {
      const uint32_t n = step % 2 == 1 ? kNodes - 1 - i : i;
      const auto g = Gradient(layout, n, step, overflow && n == 1);
      PushBackwards(*plain[n].job, step, n, g, 700);
      PushBackwards(*spec[n].job, step, n, g, 300 + 200 * n);
    }
    if (step == 1) { ASSERT_TRUE(spec[0].job->StepAhead(step, kLr, kScale).ok()); }
    auto stats = spec[0].job->GradStats(step);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->nonfinite_count > 0, overflow);
    AwaitSpeculation(layout.num_blocks());
    ASSERT_TRUE(plain[0].job->Step(step, kLr, final_scale, overflow).ok());
    ASSERT_TRUE(spec[0].job->Step(step, kLr, final_scale, overflow).ok());
    EXPECT_EQ(Speculated("spec"), 0u);
  }
  ExpectSame(*plain[0].job, *spec[0].job, 5);
}

// Answers dropped in the middle of the speculation: the Step sent ahead,
// pushes and the Step itself reach the servers again (the client retries
// after a proxy cut its connections); and a Step that expired while a
// node's last piece was missing changed nothing.
TEST_F(SpeculativeStepProcessTest, RetriesAndAnExpiredStepDuringTheSpeculation) {
  std::vector<std::unique_ptr<FaultProxy>> proxies;
  std::vector<std::string> via;
  for (const std::string& address : cluster_->addresses()) {
    auto proxy = FaultProxy::Start(address);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    via.push_back((*proxy)->address());
    proxies.push_back(*std::move(proxy));
  }
  auto cut_answers = [&] {
    for (auto& p : proxies) p->CutAfter(FaultProxy::Direction::kToClient, 0);
  };
  std::vector<Node> plain, spec;
  for (uint32_t n = 0; n < kNodes; ++n) {
    plain.push_back(Open(Spec(false), cluster_->addresses()));
    spec.push_back(Open(Spec(true), via));
  }
  const Layout& layout = plain[0].job->layout();
  const uint64_t n = layout.used_elems;
  for (uint64_t step = 0; step < 2; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    cut_answers();
    absl::Status ahead = spec[0].job->StepAhead(step, kLr, kScale);
    ASSERT_TRUE(ahead.ok()) << ahead;
    const auto g0 = Gradient(layout, 0, step, false), g1 = Gradient(layout, 1, step, false);
    PushBackwards(*plain[0].job, step, 0, g0, n);
    PushBackwards(*plain[1].job, step, 1, g1, n);
    PushBackwards(*spec[1].job, step, 1, g1, 256);
    // Node 0's gradient but its last 100 elements: one block waits.
    ASSERT_TRUE(spec[0].job->Push(step, 0, {0, n - 100}, g0.data(), v1::DTYPE_FP32).ok());
    while (Speculated("spec") + 1 < layout.num_blocks()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    // A Step whose caller's deadline passes while it waits for that block.
    auto stub = v1::StateService::NewStub(
        grpc::CreateChannel(cluster_->addresses().back(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("zerostate-job-token", kTestJobToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::StepRequest req;
    req.set_job_id("spec");
    req.set_step(step);
    req.set_lr(kLr);
    req.set_grad_scale(kScale);
    v1::StepResponse resp;
    grpc::Status expired = stub->Step(&ctx, req, &resp);
    EXPECT_EQ(expired.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << expired.error_message();
    // Retries: node 1's pushes again (answers dropped), node 0's last piece.
    cut_answers();
    PushBackwards(*spec[1].job, step, 1, g1, 512);
    ASSERT_TRUE(spec[0].job->Push(step, 0, {n - 100, n}, g0.data() + n - 100, v1::DTYPE_FP32).ok());
    AwaitSpeculation(layout.num_blocks());
    ASSERT_TRUE(spec[0].job->StepAhead(step, kLr, kScale).ok());  // a late retry: harmless
    ASSERT_TRUE(plain[0].job->Step(step, kLr, kScale, false).ok());
    cut_answers();  // the Step's answer is lost; the client asks again
    absl::Status stepped = spec[0].job->Step(step, kLr, kScale, false);
    ASSERT_TRUE(stepped.ok()) << stepped;
    ASSERT_TRUE(spec[0].job->Step(step, kLr, kScale, false).ok());  // already applied
  }
  ExpectSame(*plain[0].job, *spec[0].job, 2);
}

}  // namespace
}  // namespace zerostate::testing
