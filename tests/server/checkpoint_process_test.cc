// Checkpoints through real server processes: a SIGKILL in the middle of a
// checkpoint leaves the previous one whole and restorable, and the
// `zerostate ckpt` tool lists, verifies, inspects and exports it to a
// safetensors file that an independent reader (numpy) reads back.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/core/checkpoint/checkpoint_reader.h"
#include "tests/testing/server_process.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate {
namespace {

constexpr uint32_t kBlock = 262144;
constexpr int64_t kRows = 2048, kCols = 4096;  // 8M parameters, 96 MiB of AdamW state

class CheckpointProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/zs-ckpt-proc-XXXXXX";
    root_ = mkdtemp(tmpl);
    testing::ServerProcessOptions opt;
    opt.binary = ZEROSTATE_SERVER_PATH;
    opt.args = {"--metrics_listen=", "--threads=2"};
    auto server = testing::ServerProcess::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    Connect();
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Connect() {
    stub_ = v1::StateService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }
  static std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 60) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    c->AddMetadata("zerostate-job-token", "checkpoint-process-test-token-0123456789");
    return c;
  }

  void Register() {
    v1::RegisterJobRequest req;
    auto* spec = req.mutable_spec();
    spec->set_job_id("big");
    auto* w = spec->add_tensors();
    w->set_name("w");
    w->add_shape(kRows);
    w->add_shape(kCols);
    spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
    spec->set_num_nodes(1);
    spec->set_grad_dtype(v1::DTYPE_BF16);
    spec->set_weight_dtype(v1::DTYPE_BF16);
    spec->set_block_elems(kBlock);
    req.add_servers(server_->address());
    v1::RegisterJobResponse resp;
    ASSERT_TRUE(stub_->RegisterJob(Ctx().get(), req, &resp).ok());
  }

  void Step(uint64_t step) {
    v1::PushResponse presp;
    auto ctx = Ctx();
    auto writer = stub_->PushGradients(ctx.get(), &presp);
    std::string data(kBlock * 2, '\0');
    for (uint32_t i = 0; i < kBlock; ++i) data[2 * i + 1] = static_cast<char>(0x3c + (i + step) % 4);
    for (uint64_t b = 0; b < kRows * kCols / kBlock; ++b) {
      v1::Chunk c;
      c.set_job_id("big");
      c.set_step(step);
      c.set_block(b);
      c.set_dtype(v1::DTYPE_BF16);
      c.set_data(data);
      ASSERT_TRUE(writer->Write(c));
    }
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
    v1::StepRequest sreq;
    sreq.set_job_id("big");
    sreq.set_step(step);
    sreq.set_lr(1e-3f);
    v1::StepResponse sresp;
    ASSERT_TRUE(stub_->Step(Ctx().get(), sreq, &sresp).ok());
  }

  grpc::Status Checkpoint(uint64_t version, v1::CheckpointResponse* resp) {
    v1::CheckpointRequest req;
    req.set_job_id("big");
    req.set_version(version);
    req.set_root(root_);
    return stub_->Checkpoint(Ctx().get(), req, resp);
  }

  std::vector<float> Master(uint64_t version) {
    v1::GatherRequest req;
    req.set_job_id("big");
    req.set_min_version(version);
    req.set_dtype(v1::DTYPE_FP32);
    auto ctx = Ctx();
    auto reader = stub_->Gather(ctx.get(), req);
    std::vector<float> out;
    v1::Chunk c;
    while (reader->Read(&c)) {
      auto* f = reinterpret_cast<const float*>(c.data().data());
      out.insert(out.end(), f, f + c.data().size() / 4);
    }
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  static int Run(const std::string& cmd) {
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  std::string root_;
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<v1::StateService::Stub> stub_;
};

TEST_F(CheckpointProcessTest, KillDuringCheckpointLeavesThePreviousOneWhole) {
  Register();
  Step(0);
  v1::CheckpointResponse first;
  ASSERT_TRUE(Checkpoint(1, &first).ok());
  std::vector<float> at1 = Master(1);
  Step(1);
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(60));
    ASSERT_TRUE(server_->Kill().ok());
  });
  v1::CheckpointResponse second;
  grpc::Status s = Checkpoint(2, &second);
  killer.join();
  // The first checkpoint is whole; the second is complete and valid, or
  // incomplete and refused, never complete and corrupt.
  auto v1ckpt = server::CheckpointReader::Open(first.path());
  ASSERT_TRUE(v1ckpt.ok()) << v1ckpt.status();
  EXPECT_TRUE((*v1ckpt)->VerifyAll().ok());
  auto v2ckpt = server::CheckpointReader::Open(absl::StrCat(root_, "/big/v2"));
  if (v2ckpt.ok()) { EXPECT_TRUE((*v2ckpt)->VerifyAll().ok()); }
  std::cerr << "second checkpoint: rpc " << s.error_code() << ", on disk "
            << (v2ckpt.ok() ? "complete" : std::string(v2ckpt.status().message())) << "\n";

  ASSERT_TRUE(server_->Restart().ok());
  Connect();
  v1::RestoreRequest req;
  req.set_path(first.path());
  req.add_servers(server_->address());
  v1::RestoreResponse resp;
  ASSERT_TRUE(stub_->Restore(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.info().version(), 1u);
  EXPECT_EQ(Master(1), at1);
}

TEST_F(CheckpointProcessTest, ToolListsVerifiesInspectsAndExportsSafetensors) {
  Register();
  Step(0);
  v1::CheckpointResponse ck;
  ASSERT_TRUE(Checkpoint(1, &ck).ok());
  std::vector<float> weights = Master(1);
  std::string tool = ZEROSTATE_CLI_PATH;
  EXPECT_EQ(Run(absl::StrCat(tool, " ckpt list ", root_)), 0);
  EXPECT_EQ(Run(absl::StrCat(tool, " ckpt verify ", ck.path())), 0);
  EXPECT_EQ(Run(absl::StrCat(tool, " ckpt inspect ", ck.path())), 0);
  std::string out = root_ + "/big.safetensors", expected = root_ + "/w.f32";
  ASSERT_EQ(Run(absl::StrCat(tool, " ckpt export ", ck.path(), " ", out)), 0);
  {
    std::ofstream f(expected, std::ios::binary);
    f.write(reinterpret_cast<const char*>(weights.data()), kRows * kCols * sizeof(float));
  }
  EXPECT_EQ(Run(absl::StrCat("/usr/bin/python3 ", READ_SAFETENSORS_PY, " ", out, " w ", expected,
                             " ", kRows, " ", kCols)),
            0);
  // A corrupted checkpoint fails verification with exit status 1.
  std::fstream f(absl::StrCat(ck.path(), "/shard-0-of-1.state"),
                 std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(12345);
  f.put('\x55');
  f.close();
  EXPECT_EQ(Run(absl::StrCat(tool, " ckpt verify ", ck.path())), 1);
  EXPECT_EQ(Run(absl::StrCat(tool, " ckpt bogus")), 2);
}

}  // namespace
}  // namespace zerostate
