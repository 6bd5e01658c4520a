// JobClient::Step's trainer_state through 2 real zerostate-server
// processes: every server keeps it as the state of the version the step
// makes (the newest 4 versions), TrainerState reads it back, and bad
// input is refused with nothing kept.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/client/cluster_fixture.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::testing {
namespace {

class TrainerStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = ServerCluster::Start(2, TestServerOptions());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto c = client::Client::Connect(TestClientOptions(cluster_->addresses()));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    auto job = client_->RegisterJob(TestSpec("state", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
  }

  // Pushes step `step`'s (zero) gradient and steps with `state`.
  absl::Status PushAndStep(uint64_t step, const std::string& state) {
    std::vector<float> zeros(job_->layout().used_elems);
    if (auto s = job_->Push(step, 0, {0, zeros.size()}, zeros.data(), v1::DTYPE_FP32); !s.ok()) {
      return s;
    }
    return job_->Step(step, 0.01f, 1.0f, /*skip=*/false, state);
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<client::JobClient> job_;
};

TEST_F(TrainerStateTest, EachStepsStateIsKeptForTheVersionItMakes) {
  for (uint64_t step = 0; step < 6; ++step) {
    ASSERT_TRUE(PushAndStep(step, "state of v" + std::to_string(step + 1)).ok());
  }
  for (uint64_t v = 3; v <= 6; ++v) {
    auto state = job_->TrainerState(v);
    ASSERT_TRUE(state.ok()) << v << ": " << state.status();
    EXPECT_EQ(*state, "state of v" + std::to_string(v));
  }
  // Only the newest 4 versions are kept.
  auto old = job_->TrainerState(2);
  EXPECT_TRUE(absl::IsNotFound(old.status())) << old.status();
  EXPECT_NE(old.status().message().find("version 2"), std::string::npos) << old.status();
  // A retried step carries the same state and keeps it.
  ASSERT_TRUE(job_->Step(5, 0.01f, 1.0f, false, "state of v6").ok());
  EXPECT_EQ(*job_->TrainerState(6), "state of v6");
}

TEST_F(TrainerStateTest, AStepWithoutStateKeepsNone) {
  ASSERT_TRUE(PushAndStep(0, "").ok());
  EXPECT_TRUE(absl::IsNotFound(job_->TrainerState(1).status()));
}

TEST_F(TrainerStateTest, BadInputIsRefusedAndNothingIsKept) {
  // Too large: refused before sending, the step not taken.
  std::vector<float> zeros(job_->layout().used_elems);
  ASSERT_TRUE(job_->Push(0, 0, {0, zeros.size()}, zeros.data(), v1::DTYPE_FP32).ok());
  absl::Status big = job_->Step(0, 0.01f, 1.0f, false, std::string(1025, 'x'));
  EXPECT_TRUE(absl::IsInvalidArgument(big)) << big;
  EXPECT_NE(big.message().find("trainer_state: 1025 bytes exceed 1024"), std::string::npos) << big;
  EXPECT_EQ(*job_->Version(), 0u);
  EXPECT_TRUE(absl::IsNotFound(job_->TrainerState(1).status()));
  // A step too far ahead: refused by the servers, no state kept for it.
  absl::Status ahead = job_->Step(3, 0.01f, 1.0f, false, "ahead");
  EXPECT_TRUE(absl::IsFailedPrecondition(ahead)) << ahead;
  EXPECT_TRUE(absl::IsNotFound(job_->TrainerState(4).status()));
  // Version 0: no step made it.
  auto zero = job_->TrainerState(0);
  EXPECT_TRUE(absl::IsInvalidArgument(zero.status())) << zero.status();
  // 1024 bytes is the limit, and is kept.
  ASSERT_TRUE(job_->Step(0, 0.01f, 1.0f, false, std::string(1024, 'y')).ok());
  EXPECT_EQ(*job_->TrainerState(1), std::string(1024, 'y'));
}

// The servers check too, for callers other than this client.
TEST_F(TrainerStateTest, EachServerRefusesAnOversizedStateAndChangesNothing) {
  std::vector<float> zeros(job_->layout().used_elems);
  ASSERT_TRUE(job_->Push(0, 0, {0, zeros.size()}, zeros.data(), v1::DTYPE_FP32).ok());
  for (const std::string& address : cluster_->addresses()) {
    auto stub = v1::StateService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.AddMetadata("zerostate-job-token", kTestJobToken);
    v1::StepRequest req;
    req.set_job_id("state");
    req.set_step(0);
    req.set_lr(0.01f);
    req.set_trainer_state(std::string(1025, 'x'));
    v1::StepResponse resp;
    grpc::Status st = stub->Step(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << address << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("trainer_state: 1025 bytes exceed 1024"), std::string::npos)
        << st.error_message();
  }
  EXPECT_EQ(*job_->Version(), 0u);
  EXPECT_TRUE(absl::IsNotFound(job_->TrainerState(1).status()));
}

}  // namespace
}  // namespace zerostate::testing
