// The cap on the gRPC edge's chunk streams (--max_grpc_streams), against a
// real server process: with the cap reached by a Gather waiting for a
// version, a second Gather and a PushGradients stream are answered
// RESOURCE_EXHAUSTED naming the flag, before any of their messages is
// read, and counted in zerostate_grpc_streams_refused_total; once the
// waiting stream ends, a new one is served. And the values the server
// refuses at start.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "tests/server/auth_fixture.h"

namespace zerostate::testing {
namespace {

constexpr char kOpen[] = "zerostate_grpc_streams";
constexpr char kRefused[] = "zerostate_grpc_streams_refused_total";

class GrpcStreamCapTest : public AuthServerTest {
 protected:
  double Metric(const std::string& name) { return MetricValue(Metrics(), name); }

  // Polls until `name` equals `want` (no time limit: the test's timeout is
  // the backstop).
  void AwaitMetric(const std::string& name, double want) {
    while (Metric(name) != want) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  v1::GatherRequest Gather(uint64_t min_version) {
    v1::GatherRequest req;
    req.set_job_id("j");
    req.set_dtype(v1::DTYPE_FP32);
    req.set_min_version(min_version);
    return req;
  }
};

// Expects `status` the cap's refusal.
void ExpectRefused(const grpc::Status& status, const std::string& what) {
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << what << ": "
                                                                         << Answer(status);
  EXPECT_NE(status.error_message().find("--max_grpc_streams"), std::string::npos)
      << what << ": " << Answer(status);
}

TEST_F(GrpcStreamCapTest, StreamsOverTheCapAreRefusedUntilOneEnds) {
  StartServer({"--plaintext", "--max_grpc_streams=1"});
  ASSERT_TRUE(Register("j", kTokenA).ok());
  EXPECT_EQ(Metric(kOpen), 0);
  EXPECT_EQ(Metric(kRefused), 0);

  // Waits for version 1, which never comes: it holds the one slot.
  auto waiting_ctx = Ctx(kTokenA);
  auto waiting = stub_->Gather(waiting_ctx.get(), Gather(1));
  AwaitMetric(kOpen, 1);

  {
    auto ctx = Ctx(kTokenA);
    auto reader = stub_->Gather(ctx.get(), Gather(0));
    v1::Chunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    ExpectRefused(reader->Finish(), "a second Gather");
  }
  {
    auto ctx = Ctx(kTokenA);
    v1::PushResponse resp;
    auto writer = stub_->PushGradients(ctx.get(), &resp);
    v1::Chunk chunk;
    chunk.set_job_id("j");
    chunk.set_dtype(v1::DTYPE_FP32);
    chunk.set_data(std::string(4096, '\0'));
    writer->Write(chunk);  // may fail: the server finished the stream already
    writer->WritesDone();
    ExpectRefused(writer->Finish(), "a PushGradients stream");
  }
  EXPECT_EQ(Metric(kRefused), 2);
  EXPECT_EQ(Metric(kOpen), 1);

  // The waiting stream ends; its slot is given back and a new stream served.
  waiting_ctx->TryCancel();
  v1::Chunk ignored;
  while (waiting->Read(&ignored)) {
  }
  EXPECT_EQ(waiting->Finish().error_code(), grpc::StatusCode::CANCELLED);
  AwaitMetric(kOpen, 0);

  auto ctx = Ctx(kTokenA);
  auto reader = stub_->Gather(ctx.get(), Gather(0));
  v1::Chunk chunk;
  uint64_t elems = 0;
  while (reader->Read(&chunk)) elems += chunk.data().size() / sizeof(float);
  grpc::Status served = reader->Finish();
  EXPECT_TRUE(served.ok()) << Answer(served);
  EXPECT_GE(elems, 5000u);  // the shard: the job's one tensor and its padding
  EXPECT_EQ(Metric(kRefused), 2);
}

TEST_F(GrpcStreamCapTest, BadValuesAreRefusedNamingTheFlag) {
  for (const char* flag : {"--max_grpc_streams=0", "--max_grpc_streams=-1"}) {
    char path[] = "/tmp/zs-grpc-cap-flag-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ServerProcessOptions o;
    o.binary = ZEROSTATE_SERVER_PATH;
    o.args = {"--plaintext", "--metrics_listen=", flag};
    o.stderr_path = path;
    auto server = ServerProcess::Start(o);
    EXPECT_FALSE(server.ok()) << flag << " was accepted";
    std::ifstream in(path);
    std::stringstream log;
    log << in.rdbuf();
    unlink(path);
    EXPECT_NE(log.str().find("max_grpc_streams"), std::string::npos) << flag << ": " << log.str();
  }
}

}  // namespace
}  // namespace zerostate::testing
