// What a client writer relies on around a step, against real
// zerostate-server processes over loopback, through the generated stubs and
// raw data-plane frames (no zerostate client logic):
//   - a wait answers a margin before the caller's deadline, naming what it
//     waits for (Step, GradStats, Gather; the data plane's gather too);
//   - a Step its caller gave up on (deadline or cancellation, at every
//     point of its wait, with the CPUs loaded) is never applied afterwards:
//     the next Step applies with its own parameters;
//   - an empty shard (fewer blocks than servers) answers truthfully;
//   - a chunk without job_id is INVALID_ARGUMENT naming the field, on both
//     planes.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/data_conn.h"
#include "common/frame_io.h"
#include "server/core/optimizer/optimizer.h"
#include "tests/testing/grad_chunk.h"
#include "tests/testing/server_process.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate {
namespace {

constexpr uint32_t kBlock = 256;
constexpr char kToken[] = "step-semantics-test-token-0123456789abcd";
constexpr uint32_t kWaitBlocks = 3;  // blocks of the jobs whose step waits

v1::RegisterJobRequest JobRequest(const std::string& job, uint32_t blocks,
                                  const std::vector<std::string>& servers, uint32_t shard) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id(job);
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(blocks * kBlock);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->mutable_optimizer()->set_weight_decay(0.01f);
  spec->set_num_nodes(2);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_FP32);
  spec->set_block_elems(kBlock);
  spec->set_seed(3);
  for (const auto& s : servers) req.add_servers(s);
  req.set_shard_index(shard);
  return req;
}

std::vector<float> Gradient(uint32_t node, uint64_t block) {
  std::vector<float> g(kBlock);
  for (uint32_t i = 0; i < kBlock; ++i) g[i] = 0.01f * static_cast<float>((i + block * 7) % 13) - 0.05f * node;
  return g;
}

v1::Chunk GradChunk(const std::string& job, uint64_t step, uint32_t node, uint64_t block) {
  return testing::Fp32GradChunk(job, step, node, block, Gradient(node, block));
}

void ExpectCode(const grpc::Status& s, grpc::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << s.error_message();
}

// Keeps every core busy while it lives: the server's threads compete.
class CpuLoad {
 public:
  CpuLoad() {
    for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i) {
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
    }
  }
  ~CpuLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

class StepSemanticsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ServerProcessOptions opt;
    opt.binary = ZEROSTATE_SERVER_PATH;
    opt.args = {"--metrics_listen=127.0.0.1:0", "--data_listen=127.0.0.1:0", "--threads=2",
                "--ram_budget_bytes=100000000"};
    auto cluster = testing::ServerCluster::Start(2, opt);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    for (int i = 0; i < 2; ++i) {
      stubs_.push_back(v1::StateService::NewStub(grpc::CreateChannel(
          cluster_->server(i).address(), grpc::InsecureChannelCredentials())));
    }
  }

  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(30)) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    ctx->AddMetadata("zerostate-job-token", kToken);
    return ctx;
  }

  // A job of `blocks` blocks on server 0 alone.
  void Register(const std::string& job, uint32_t blocks) {
    v1::RegisterJobResponse resp;
    auto s = stubs_[0]->RegisterJob(
        Context().get(), JobRequest(job, blocks, {cluster_->server(0).address()}, 0), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  grpc::Status Push(int server, const std::vector<v1::Chunk>& chunks) {
    v1::PushResponse resp;
    auto ctx = Context();
    auto writer = stubs_[server]->PushGradients(ctx.get(), &resp);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  void PushBlocks(const std::string& job, uint32_t node, uint64_t from, uint64_t to) {
    std::vector<v1::Chunk> chunks;
    for (uint64_t b = from; b < to; ++b) chunks.push_back(GradChunk(job, 0, node, b));
    if (chunks.empty()) return;
    auto s = Push(0, chunks);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  static v1::StepRequest StepReq(const std::string& job, uint64_t step, float lr) {
    v1::StepRequest req;
    req.set_job_id(job);
    req.set_step(step);
    req.set_lr(lr);
    return req;
  }

  std::vector<float> GatherFp32(const std::string& job, uint64_t min_version, grpc::Status* s) {
    v1::GatherRequest req;
    req.set_job_id(job);
    req.set_min_version(min_version);
    req.set_dtype(v1::DTYPE_FP32);
    auto ctx = Context();
    auto reader = stubs_[0]->Gather(ctx.get(), req);
    std::vector<float> out;
    v1::Chunk c;
    while (reader->Read(&c)) {
      const auto* p = reinterpret_cast<const float*>(c.data().data());
      out.insert(out.end(), p, p + c.data().size() / sizeof(float));
    }
    *s = reader->Finish();
    return out;
  }

  v1::JobStatusResponse Status(const std::string& job) {
    v1::JobStatusRequest req;
    req.set_job_id(job);
    v1::JobStatusResponse resp;
    auto s = stubs_[0]->JobStatus(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  uint64_t Version(const std::string& job) { return Status(job).max_version(); }

  // zerostate_server_rpc_rejected_total for Step with `reason` on server 0.
  double StepsRejected(const std::string& reason) {
    auto page = testing::ScrapeMetrics(cluster_->server(0).metrics_address());
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return -1;
    double v = testing::MetricValue(
        *page, absl::StrCat("zerostate_rpc_rejected_total{method=\"Step\",reason=\"", reason,
                            "\"}"));
    return v < 0 ? 0 : v;
  }

  // Steps `job` (whose step 0 has not been applied) with lr 0.05 and
  // checks the weights are those of one AdamW step with that lr from
  // `initial`: whatever was asked before did not take effect.
  void ExpectNextStepAppliesItsOwnLr(const std::string& job, const std::vector<float>& initial,
                                     uint32_t blocks) {
    EXPECT_EQ(Version(job), 0u) << "the abandoned step was applied";
    v1::StepResponse resp;
    auto s = stubs_[0]->Step(Context().get(), StepReq(job, 0, 0.05f), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_FALSE(resp.already_applied());
    EXPECT_EQ(resp.version(), 1u);
    std::vector<float> want = initial, m(initial.size()), v(initial.size());
    std::vector<float> grad(initial.size());
    for (uint64_t b = 0; b < blocks; ++b) {
      for (uint32_t node = 0; node < 2; ++node) {
        std::vector<float> g = Gradient(node, b);
        for (uint32_t i = 0; i < kBlock; ++i) grad[b * kBlock + i] += g[i];
      }
    }
    server::StepParams p;
    p.config = Status(job).spec().optimizer();  // normalized: the server's betas, eps
    p.lr = 0.05f;
    server::BlockRefs r{want.data(), m.data(), v.data(), grad.data()};
    r.n = want.size();
    server::StepBlock(p, r);
    grpc::Status gs;
    std::vector<float> got = GatherFp32(job, 1, &gs);
    ASSERT_TRUE(gs.ok()) << gs.error_message();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
  }

  // For k = 0 .. kWaitBlocks - 1, with every core busy: a job whose step 0
  // has node 1's gradient; abandon(job, k) has node 0 push blocks [0, k)
  // and gives up a Step with lr 0.9 waiting at block k; then node 0 pushes
  // the rest, and the next Step must apply with its own lr.
  void AtEveryPointOfTheWait(const std::string& name,
                             const std::function<void(const std::string&, uint32_t)>& abandon) {
    CpuLoad load;
    for (uint32_t k = 0; k < kWaitBlocks; ++k) {
      SCOPED_TRACE(absl::StrCat("the Step given up at block ", k));
      const std::string job = absl::StrCat(name, k);
      Register(job, kWaitBlocks);
      grpc::Status gs;
      std::vector<float> initial = GatherFp32(job, 0, &gs);
      ASSERT_TRUE(gs.ok()) << gs.error_message();
      PushBlocks(job, 1, 0, kWaitBlocks);
      ASSERT_NO_FATAL_FAILURE(abandon(job, k));
      PushBlocks(job, 0, k, kWaitBlocks);
      ExpectNextStepAppliesItsOwnLr(job, initial, kWaitBlocks);
    }
  }

  std::unique_ptr<testing::ServerCluster> cluster_;
  std::vector<std::unique_ptr<v1::StateService::Stub>> stubs_;
};

// Defect: the server waited until the caller's own deadline, so the caller's
// timer fired first and it saw a bare "Deadline Exceeded".
TEST_F(StepSemanticsTest, WaitsAnswerBeforeTheCallersDeadlineNamingWhatTheyWaitFor) {
  Register("margin", 1);
  PushBlocks("margin", 0, 0, 1);  // node 1 never pushes
  const absl::Duration timeout = absl::Seconds(3);
  auto step = std::async(std::launch::async, [&] {
    v1::StepResponse resp;
    return stubs_[0]->Step(Context(timeout).get(), StepReq("margin", 0, 0.01f), &resp);
  });
  auto stats = std::async(std::launch::async, [&] {
    v1::GradStatsRequest req;
    req.set_job_id("margin");
    v1::GradStatsResponse resp;
    return stubs_[0]->GradStats(Context(timeout).get(), req, &resp);
  });
  auto gather = std::async(std::launch::async, [&] {
    v1::GatherRequest req;
    req.set_job_id("margin");
    req.set_min_version(1);
    req.set_dtype(v1::DTYPE_FP32);
    auto ctx = Context(timeout);
    auto reader = stubs_[0]->Gather(ctx.get(), req);
    v1::Chunk c;
    while (reader->Read(&c)) {
    }
    return reader->Finish();
  });
  // The data plane's gather, with a caller that waits exactly timeout_ms.
  auto data_gather = std::async(std::launch::async, [&]() -> absl::StatusOr<v1::DataFrameMeta> {
    client::DataConnPool pool(cluster_->server(0).data_address(), 0);
    auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
    if (!conn.ok()) return conn.status();
    v1::DataFrameMeta meta;
    meta.set_token(kToken);
    meta.mutable_gather()->set_job_id("margin");
    meta.mutable_gather()->set_min_version(1);
    meta.mutable_gather()->set_dtype(v1::DTYPE_FP32);
    meta.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    (*conn)->stream().SetDeadline(absl::Now() + timeout);
    if (auto s = SendFrame((*conn)->stream(), FrameType::kGather, meta); !s.ok()) return s;
    auto end = RecvFrameStart((*conn)->stream());
    if (!end.ok()) return end.status();
    if (!end->has_value()) return absl::DataLossError("closed");
    return (*end)->meta;
  });
  ExpectCode(step.get(), grpc::StatusCode::DEADLINE_EXCEEDED,
             "block 0 is still missing gradients from nodes [1]");
  ExpectCode(stats.get(), grpc::StatusCode::DEADLINE_EXCEEDED,
             "block 0 is still missing gradients from nodes [1]");
  ExpectCode(gather.get(), grpc::StatusCode::DEADLINE_EXCEEDED, "did not reach version 1");
  auto end = data_gather.get();
  ASSERT_TRUE(end.ok()) << "the data plane answered after the caller's timeout: " << end.status();
  EXPECT_EQ(end->code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded)) << end->message();
  EXPECT_NE(end->message().find("did not reach version 1"), std::string::npos) << end->message();
}

// Defect: a Step whose caller saw it time out was applied later, when the
// missing gradients came, with its own (abandoned) lr. Node 1 pushes
// everything, node 0 the first k blocks; the Step times out waiting at
// block k, for every k; then node 0 pushes the rest at once.
TEST_F(StepSemanticsTest, AStepThatTimedOutIsNeverAppliedAfterwards) {
  AtEveryPointOfTheWait("expired", [&](const std::string& job, uint32_t k) {
    PushBlocks(job, 0, 0, k);
    v1::StepResponse resp;
    // 3 s: the answer comes 300 ms before the caller's deadline, time enough
    // on 2 loaded cores under the sanitizers (1 s left 100 ms, and the
    // client's own timer once fired first: a bare "Deadline Exceeded").
    ExpectCode(stubs_[0]->Step(Context(absl::Seconds(3)).get(), StepReq(job, 0, 0.9f), &resp),
               grpc::StatusCode::DEADLINE_EXCEEDED,
               absl::StrCat("block ", k, " is still missing gradients from nodes [0]"));
  });
}

// The same with the caller cancelling, after node 0 pushed k blocks while
// the Step waited: once the server has seen the cancellation (its Step
// answered CANCELLED), the gradients that complete the step do not apply it.
TEST_F(StepSemanticsTest, ACancelledStepIsNeverAppliedAfterwards) {
  AtEveryPointOfTheWait("cancelled", [&](const std::string& job, uint32_t k) {
    const double cancelled_before = StepsRejected("CANCELLED");
    auto ctx = Context();
    v1::StepRequest req = StepReq(job, 0, 0.9f);
    v1::StepResponse resp;
    std::promise<grpc::Status> answered;
    stubs_[0]->async()->Step(ctx.get(), &req, &resp,
                             [&](grpc::Status s) { answered.set_value(std::move(s)); });
    // A call on the same connection answered: the Step's headers, sent
    // before it, have reached the server.
    Version(job);
    PushBlocks(job, 0, 0, k);
    ctx->TryCancel();
    EXPECT_EQ(answered.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
    // Until the server has seen it: its wait polls for the cancellation.
    absl::Time bound = absl::Now() + absl::Seconds(60);
    while (StepsRejected("CANCELLED") < cancelled_before + 1 && absl::Now() < bound) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_GE(StepsRejected("CANCELLED"), cancelled_before + 1)
        << "the server never answered the cancelled Step";
  });
}

// Defect: on a server whose shard holds no block, Step answered
// already_applied with version step + 1 for any step, and a whole-shard
// Gather was INVALID_ARGUMENT.
TEST_F(StepSemanticsTest, AnEmptyShardAnswersTruthfully) {
  std::vector<std::string> servers = cluster_->addresses();
  for (uint32_t shard = 0; shard < 2; ++shard) {
    v1::RegisterJobResponse resp;
    auto s = stubs_[shard]->RegisterJob(Context().get(), JobRequest("tiny", 1, servers, shard),
                                        &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.info().shard_blocks(), shard == 0 ? 0u : 1u);  // blocks [0, 0) and [0, 1)
  }
  v1::StepResponse step;
  ASSERT_TRUE(stubs_[0]->Step(Context().get(), StepReq("tiny", 5, 0.01f), &step).ok());
  EXPECT_FALSE(step.already_applied());
  EXPECT_EQ(step.version(), 0u);
  v1::GradStatsRequest sreq;
  sreq.set_job_id("tiny");
  v1::GradStatsResponse stats;
  ASSERT_TRUE(stubs_[0]->GradStats(Context().get(), sreq, &stats).ok());
  EXPECT_EQ(stats.sum_squares(), 0.0);
  EXPECT_EQ(stats.nonfinite_count(), 0u);
  v1::GatherRequest greq;
  greq.set_job_id("tiny");
  greq.set_dtype(v1::DTYPE_FP32);
  auto ctx = Context();
  auto reader = stubs_[0]->Gather(ctx.get(), greq);
  v1::Chunk c;
  int chunks = 0;
  while (reader->Read(&c)) ++chunks;
  auto gs = reader->Finish();
  EXPECT_TRUE(gs.ok()) << gs.error_message();
  EXPECT_EQ(chunks, 0);
  // A range is still checked against the (empty) shard.
  greq.set_begin(0);
  greq.set_end(kBlock);
  auto ctx2 = Context();
  auto reader2 = stubs_[0]->Gather(ctx2.get(), greq);
  while (reader2->Read(&c)) {
  }
  ExpectCode(reader2->Finish(), grpc::StatusCode::INVALID_ARGUMENT, "outside this server's shard");
}

// Defect: a chunk with no job_id got PERMISSION_DENIED "the job token does
// not grant access to job ''".
TEST_F(StepSemanticsTest, AChunkWithoutJobIdIsInvalidArgumentNamingTheField) {
  Register("named", 1);
  v1::Chunk c = GradChunk("", 0, 0, 0);
  ExpectCode(Push(0, {c}), grpc::StatusCode::INVALID_ARGUMENT, "job_id");

  client::DataConnPool pool(cluster_->server(0).data_address(), 0);
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(10));
  v1::DataFrameMeta meta;
  meta.set_token(kToken);
  *meta.mutable_chunk() = c;
  meta.mutable_chunk()->clear_data();
  ASSERT_TRUE(SendFrame((*conn)->stream(), FrameType::kPush, meta, c.data().data(), c.data().size())
                  .ok());
  auto ack = RecvFrameStart((*conn)->stream());
  ASSERT_TRUE(ack.ok() && ack->has_value()) << (ack.ok() ? "closed" : ack.status().ToString());
  EXPECT_EQ((*ack)->header.type, FrameType::kPushAck);
  EXPECT_EQ((*ack)->meta.code(), static_cast<int>(absl::StatusCode::kInvalidArgument))
      << (*ack)->meta.message();
  EXPECT_NE((*ack)->meta.message().find("job_id"), std::string::npos) << (*ack)->meta.message();
  EXPECT_EQ(Version("named"), 0u);
}

}  // namespace
}  // namespace zerostate
