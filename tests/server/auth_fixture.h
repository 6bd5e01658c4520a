// Shared setup of the credential and quota tests: a real zerostate-server
// process on 127.0.0.1 (its stderr in a file the test can read), driven
// with the generated stubs, each call carrying the token the test chooses.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/server_process.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::testing {

// Two tokens of the form a caller may choose (32 to 256 printable characters).
inline constexpr char kTokenA[] = "token-a-0123456789abcdef0123456789abcdef";
inline constexpr char kTokenB[] = "token-b-0123456789abcdef0123456789abcdef";

// A one-tensor job of `elems` fp32 weights, AdamW, one node.
inline v1::RegisterJobRequest JobRequest(const std::string& id, const std::string& address,
                                         int64_t elems = 5000) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id(id);
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(elems);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->set_num_nodes(1);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_FP32);
  spec->set_block_elems(1024);
  spec->set_seed(5);
  req.add_servers(address);
  return req;
}

// A context with a 10 s deadline carrying `token` ("" = none).
inline std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) ctx->AddMetadata("zerostate-job-token", token);
  return ctx;
}

class AuthServerTest : public ::testing::Test {
 protected:
  // Starts the server with `args` (after --plaintext and a metrics port).
  void StartServer(std::vector<std::string> args) {
    log_path_ = ::testing::TempDir() + "auth_server_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log";
    std::remove(log_path_.c_str());
    ServerProcessOptions opt;
    opt.binary = ZEROSTATE_SERVER_PATH;
    opt.args = {"--metrics_listen=127.0.0.1:0", "--threads=1", "--ram_budget_bytes=100000000"};
    opt.args.insert(opt.args.end(), args.begin(), args.end());
    opt.stderr_path = log_path_;
    auto server = ServerProcess::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::StateService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Register(const std::string& id, const std::string& token,
                        v1::RegisterJobResponse* resp = nullptr, int64_t elems = 5000) {
    v1::RegisterJobResponse ignored;
    return stub_->RegisterJob(Ctx(token).get(), JobRequest(id, server_->address(), elems),
                              resp != nullptr ? resp : &ignored);
  }

  grpc::Status Status(const std::string& id, const std::string& token) {
    v1::JobStatusRequest req;
    req.set_job_id(id);
    v1::JobStatusResponse resp;
    return stub_->JobStatus(Ctx(token).get(), req, &resp);
  }

  std::string Metrics() {
    auto body = ScrapeMetrics(server_->metrics_address());
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : "";
  }

  // What the server wrote on stderr so far.
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string log_path_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<v1::StateService::Stub> stub_;
};

// The code and message, for comparing two answers.
inline std::string Answer(const grpc::Status& s) {
  return std::to_string(s.error_code()) + ": " + s.error_message();
}

}  // namespace zerostate::testing
