// A real zerostate-server process on 127.0.0.1, driven over gRPC with the
// generated stubs: the whole step, concurrent nodes, every bad input by
// status code, health checking, the metrics endpoint and a clean SIGTERM.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/convert.h"
#include "common/init.h"
#include "common/job_spec.h"
#include "tests/testing/server_process.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate {
namespace {

constexpr uint32_t kBlock = 1024;
constexpr uint32_t kNodes = 3;

v1::RegisterJobRequest MakeRequest(const std::string& address) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("svc");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(50);
  w->add_shape(70);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_LION);
  spec->set_num_nodes(kNodes);
  spec->set_grad_dtype(v1::DTYPE_BF16);
  spec->set_weight_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(kBlock);
  spec->set_seed(11);
  req.add_servers(address);
  return req;
}

class StateServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ServerProcessOptions opt;
    opt.binary = ZEROSTATE_SERVER_PATH;
    opt.args = {"--metrics_listen=127.0.0.1:0", "--threads=2", "--ram_budget_bytes=100000000",
                "--nvme_dir=/tmp"};
    auto server = testing::ServerProcess::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::StateService::NewStub(channel_);
  }

  // Every call carries the job's token (the test's choice, 40 characters).
  std::unique_ptr<grpc::ClientContext> Context(int ms = 10000) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
    ctx->AddMetadata("zerostate-job-token", "state-service-test-token-0123456789abcd");
    return ctx;
  }

  v1::JobInfo Register() {
    v1::RegisterJobResponse resp;
    auto s = stub_->RegisterJob(Context().get(), MakeRequest(server_->address()), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.info();
  }

  // Pushes node `node`'s constant gradient for step `step` over all blocks.
  grpc::Status Push(uint64_t step, uint32_t node, const v1::JobInfo& info, float value,
                    v1::PushResponse* resp) {
    auto ctx = Context();
    auto writer = stub_->PushGradients(ctx.get(), resp);
    std::vector<uint16_t> data(kBlock, FloatToBf16(value));
    for (uint64_t b = 0; b < info.num_blocks(); ++b) {
      v1::Chunk c;
      c.set_job_id("svc");
      c.set_step(step);
      c.set_node(node);
      c.set_block(b);
      c.set_dtype(v1::DTYPE_BF16);
      c.set_data(std::string(reinterpret_cast<const char*>(data.data()), kBlock * 2));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status PushChunk(const v1::Chunk& c) {
    v1::PushResponse resp;
    auto ctx = Context();
    auto writer = stub_->PushGradients(ctx.get(), &resp);
    writer->Write(c);
    writer->WritesDone();
    return writer->Finish();
  }

  std::vector<uint16_t> Gather(uint64_t min_version, grpc::Status* status, int ms = 10000) {
    v1::GatherRequest req;
    req.set_job_id("svc");
    req.set_min_version(min_version);
    req.set_dtype(v1::DTYPE_BF16);
    auto ctx = Context(ms);
    auto reader = stub_->Gather(ctx.get(), req);
    std::vector<uint16_t> out;
    v1::Chunk c;
    while (reader->Read(&c)) {
      const auto* p = reinterpret_cast<const uint16_t*>(c.data().data());
      out.insert(out.end(), p, p + c.data().size() / 2);
    }
    *status = reader->Finish();
    return out;
  }

  std::string Scrape() {
    std::vector<std::string> hp = absl::StrSplit(server_->metrics_address(), ':');
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::stoi(hp.back()));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    std::string body;
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, n);
    close(fd);
    return body;
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StateService::Stub> stub_;
};

void ExpectCode(const grpc::Status& s, grpc::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << s.error_message();
}

TEST_F(StateServiceTest, ConcurrentNodesStepAndGatherTheLionUpdate) {
  v1::JobInfo info = Register();
  ASSERT_EQ(info.num_blocks(), 4u);  // 3500 elements in blocks of 1024
  std::vector<std::thread> nodes;
  std::vector<grpc::Status> results(kNodes);
  for (uint32_t n = 0; n < kNodes; ++n) {
    nodes.emplace_back([&, n] {
      v1::PushResponse resp;
      results[n] = Push(0, n, info, n == 1 ? -4.0f : 1.0f, &resp);
    });
  }
  for (auto& t : nodes) t.join();
  for (auto& r : results) ASSERT_TRUE(r.ok()) << r.error_message();

  v1::GradStatsRequest sreq;
  sreq.set_job_id("svc");
  v1::GradStatsResponse stats;
  ASSERT_TRUE(stub_->GradStats(Context().get(), sreq, &stats).ok());
  // (1 - 4 + 1)^2 per tensor element (3500): the pushed alignment padding
  // after the last tensor is not folded.
  EXPECT_DOUBLE_EQ(stats.sum_squares(), 3500.0 * 4.0);
  EXPECT_EQ(stats.nonfinite_count(), 0u);

  grpc::Status gs;
  auto before = Gather(0, &gs);
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  v1::StepRequest step;
  step.set_job_id("svc");
  step.set_lr(0.125f);
  v1::StepResponse sresp;
  ASSERT_TRUE(stub_->Step(Context().get(), step, &sresp).ok());
  EXPECT_EQ(sresp.version(), 1u);
  EXPECT_NE(sresp.incarnation(), 0u);
  auto after = Gather(1, &gs);
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  ASSERT_EQ(after.size(), 4u * kBlock);
  // Lion with m = 0: the update is -lr * sign(g) = +0.125 for g = -2.
  Layout layout = LayoutOf(*NormalizeJobSpec(MakeRequest("").spec()));
  std::vector<float> w0(layout.total_elems);
  FillInitialWeights(layout, 11, Range{0, layout.total_elems}, w0.data());
  for (size_t i = 0; i < 3500; ++i) {
    ASSERT_EQ(after[i], FloatToBf16(w0[i] + 0.125f)) << "element " << i;
  }
  // A retried step is acknowledged and does nothing.
  v1::StepResponse again;
  ASSERT_TRUE(stub_->Step(Context().get(), step, &again).ok());
  EXPECT_TRUE(again.already_applied());
}

TEST_F(StateServiceTest, DuplicatePushesAreAcknowledged) {
  v1::JobInfo info = Register();
  v1::PushResponse first, second;
  ASSERT_TRUE(Push(0, 0, info, 1.0f, &first).ok());
  ASSERT_TRUE(Push(0, 0, info, 1.0f, &second).ok());
  EXPECT_EQ(first.chunks_applied(), 4u);
  EXPECT_EQ(second.chunks_applied(), 0u);
  EXPECT_EQ(second.chunks_duplicate(), 4u);
}

TEST_F(StateServiceTest, BadInputsGetCodesNamingTheFieldAndChangeNothing) {
  v1::JobInfo info = Register();
  grpc::Status gs;
  auto before = Gather(0, &gs);

  v1::RegisterJobResponse rresp;
  auto other = MakeRequest(server_->address());
  other.mutable_spec()->mutable_tensors(0)->set_shape(0, 51);
  ExpectCode(stub_->RegisterJob(Context().get(), other, &rresp), grpc::StatusCode::ALREADY_EXISTS,
             "shape");
  auto malformed = MakeRequest(server_->address());
  malformed.mutable_spec()->set_job_id("m");
  malformed.mutable_spec()->mutable_optimizer()->set_beta1(2);
  ExpectCode(stub_->RegisterJob(Context().get(), malformed, &rresp),
             grpc::StatusCode::INVALID_ARGUMENT, "optimizer.beta1");
  auto huge = MakeRequest(server_->address());
  huge.mutable_spec()->set_job_id("huge");
  huge.mutable_spec()->mutable_tensors(0)->set_shape(0, 100000000);
  ExpectCode(stub_->RegisterJob(Context().get(), huge, &rresp),
             grpc::StatusCode::RESOURCE_EXHAUSTED, "RAM budget");

  v1::Chunk c;
  c.set_job_id("svc");
  c.set_dtype(v1::DTYPE_BF16);
  c.set_data(std::string(64, '\0'));
  v1::Chunk unknown = c;
  unknown.set_job_id("nope");
  ExpectCode(PushChunk(unknown), grpc::StatusCode::PERMISSION_DENIED, "nope");
  v1::Chunk out_of_range = c;
  out_of_range.set_block(info.num_blocks());
  ExpectCode(PushChunk(out_of_range), grpc::StatusCode::INVALID_ARGUMENT, "block");
  v1::Chunk wrong_len = c;
  wrong_len.set_data(std::string(3, '\0'));
  ExpectCode(PushChunk(wrong_len), grpc::StatusCode::INVALID_ARGUMENT, "length");
  v1::Chunk past_end = c;
  past_end.set_offset(kBlock - 1);
  ExpectCode(PushChunk(past_end), grpc::StatusCode::INVALID_ARGUMENT, "offset");
  v1::Chunk wrong_dtype = c;
  wrong_dtype.set_dtype(v1::DTYPE_FP32);
  ExpectCode(PushChunk(wrong_dtype), grpc::StatusCode::INVALID_ARGUMENT, "dtype");
  v1::Chunk ahead = c;
  ahead.set_step(5);
  ExpectCode(PushChunk(ahead), grpc::StatusCode::FAILED_PRECONDITION, "too far ahead");

  v1::StepRequest step;
  step.set_job_id("svc");
  step.set_step(3);
  v1::StepResponse sresp;
  ExpectCode(stub_->Step(Context().get(), step, &sresp), grpc::StatusCode::FAILED_PRECONDITION,
             "too far ahead");
  step.set_step(0);
  ExpectCode(stub_->Step(Context(200).get(), step, &sresp), grpc::StatusCode::DEADLINE_EXCEEDED,
             "");

  Gather(7, &gs, 200);
  ExpectCode(gs, grpc::StatusCode::DEADLINE_EXCEEDED, "");
  v1::GatherRequest greq;
  greq.set_job_id("svc");
  greq.set_dtype(v1::DTYPE_FP16);
  auto ctx = Context();
  auto reader = stub_->Gather(ctx.get(), greq);
  v1::Chunk ignored;
  while (reader->Read(&ignored)) {
  }
  ExpectCode(reader->Finish(), grpc::StatusCode::INVALID_ARGUMENT, "dtype");

  v1::JobStatusRequest jreq;
  jreq.set_job_id("svc");
  v1::JobStatusResponse jresp;
  ASSERT_TRUE(stub_->JobStatus(Context().get(), jreq, &jresp).ok());
  EXPECT_EQ(jresp.max_version(), 0u);
  EXPECT_EQ(jresp.blocks_waiting(), info.num_blocks());
  EXPECT_EQ(Gather(0, &gs), before);

  v1::CheckpointRequest creq;
  v1::CheckpointResponse cresp;
  creq.set_job_id("svc");
  creq.set_root("relative");
  ExpectCode(stub_->Checkpoint(Context().get(), creq, &cresp), grpc::StatusCode::INVALID_ARGUMENT,
             "root");
  v1::RestoreRequest rreq;
  v1::RestoreResponse restored;
  rreq.set_path("/nonexistent/zerostate/ckpt");
  rreq.add_servers(server_->address());
  ExpectCode(stub_->Restore(Context().get(), rreq, &restored), grpc::StatusCode::NOT_FOUND,
             "/nonexistent/zerostate/ckpt");
}

TEST_F(StateServiceTest, HealthMetricsAndCleanShutdown) {
  // grpc.health.v1.Health/Check with an empty request: response field 1 = SERVING (1).
  grpc::GenericStub generic(channel_);
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  auto ctx = Context();
  grpc::Status hs;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  generic.UnaryCall(ctx.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      std::lock_guard<std::mutex> l(mu);
                      hs = s;
                      done = true;
                      cv.notify_one();
                    });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
  }
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));

  v1::JobInfo info = Register();
  v1::PushResponse presp;
  for (uint32_t n = 0; n < kNodes; ++n) ASSERT_TRUE(Push(0, n, info, 1.0f, &presp).ok());
  v1::GradStatsRequest greq;
  greq.set_job_id("svc");
  v1::GradStatsResponse gresp;
  ASSERT_TRUE(stub_->GradStats(Context().get(), greq, &gresp).ok());
  v1::StepRequest step;
  step.set_job_id("svc");
  step.set_lr(0.1f);
  v1::StepResponse sresp;
  ASSERT_TRUE(stub_->Step(Context().get(), step, &sresp).ok());
  std::string metrics = Scrape();
  // The step's phases: both calls waited for gradients; no checkpoint ran,
  // so nothing was copied on write.
  for (auto [phase, count] : {std::pair{"wait_gradients", 2}, {"grad_stats", 1}, {"optimizer", 1},
                              {"commit", 1}}) {
    const std::string series = absl::StrCat(
        "zerostate_step_phase_seconds_count{job_id=\"svc\",phase=\"", phase, "\"} ", count, "\n");
    EXPECT_NE(metrics.find(series), std::string::npos) << series << metrics;
  }
  EXPECT_EQ(metrics.find("phase=\"copy_on_write\""), std::string::npos);
  EXPECT_NE(metrics.find("zerostate_job_steps_total{job_id=\"svc\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("zerostate_rpc_bytes_received_total{method=\"PushGradients\"} 24576"),
            std::string::npos);
  EXPECT_NE(metrics.find("zerostate_optimizer_params_total{job_id=\"svc\"} 3520"), std::string::npos);
  EXPECT_NE(metrics.find("zerostate_ram_budget_bytes 100000000"), std::string::npos);
  EXPECT_NE(metrics.find("\nzerostate_disk_capacity_bytes "), std::string::npos);
  EXPECT_EQ(metrics.find("\nzerostate_disk_capacity_bytes 0\n"), std::string::npos);

  EXPECT_TRUE(server_->Stop().ok());  // SIGTERM: exit status 0
}

// Chunk and GatherRequest bytes that are not a valid message: the server
// parses them itself (no protobuf in between), names what is wrong and
// changes nothing.
TEST_F(StateServiceTest, MalformedMessageBytesAreRefusedAndChangeNothing) {
  v1::JobInfo info = Register();
  grpc::Status gs;
  const std::vector<uint16_t> before = Gather(0, &gs);
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  v1::Chunk c;
  c.set_job_id("svc");
  c.set_dtype(v1::DTYPE_BF16);
  c.set_data(std::string(64, '\1'));
  const std::string whole = c.SerializeAsString();
  const std::pair<std::string, std::string> bad_chunks[] = {
      {whole.substr(0, whole.size() - 10), "field longer than the message"},
      {std::string("\x0b", 1), "wire type 3"},
      {std::string("\x10\xff\xff", 3), "truncated varint"},
  };
  for (const auto& [bytes, needle] : bad_chunks) {
    auto ctx = Context();
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel_.get(),
            grpc::internal::RpcMethod("/zerostate.v1.StateService/PushGradients",
                                      grpc::internal::RpcMethod::CLIENT_STREAMING),
            ctx.get(), &response));
    grpc::Slice slice(bytes);
    writer->Write(grpc::ByteBuffer(&slice, 1));
    writer->WritesDone();
    ExpectCode(writer->Finish(), grpc::StatusCode::INVALID_ARGUMENT, "malformed Chunk: " + needle);
  }

  auto ctx = Context();
  grpc::Slice garbage(std::string("\x0a\x05sv", 4));  // job_id longer than the message
  grpc::ByteBuffer request(&garbage, 1);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel_.get(),
          grpc::internal::RpcMethod("/zerostate.v1.StateService/Gather",
                                    grpc::internal::RpcMethod::SERVER_STREAMING),
          ctx.get(), request));
  grpc::ByteBuffer ignored;
  while (reader->Read(&ignored)) {
  }
  ExpectCode(reader->Finish(), grpc::StatusCode::INVALID_ARGUMENT, "malformed GatherRequest");

  v1::JobStatusRequest jreq;
  jreq.set_job_id("svc");
  v1::JobStatusResponse jresp;
  ASSERT_TRUE(stub_->JobStatus(Context().get(), jreq, &jresp).ok());
  EXPECT_EQ(jresp.blocks_waiting(), info.num_blocks());
  EXPECT_EQ(Gather(0, &gs), before);
}

}  // namespace
}  // namespace zerostate
