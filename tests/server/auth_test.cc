// Per-job credentials against a real zerostate-server process: generated
// and chosen tokens, every call on a job refused without its token, the
// same answers whether or not a job exists, register/delete/checkpoint/
// restore/rendezvous covered, and no token in the metrics or the log.
#include <filesystem>
#include <functional>
#include <string>

#include "absl/strings/str_replace.h"
#include "tests/server/auth_fixture.h"

namespace zerostate::testing {
namespace {

constexpr char kUnknownToken[] = "token-nobody-has-0123456789abcdef01234567";

using AuthTest = AuthServerTest;

// A call on job `id` with `token`, as one of the service's methods makes it.
using JobCall = std::function<grpc::Status(const std::string& id, const std::string& token)>;

std::vector<std::pair<std::string, JobCall>> JobCalls(v1::StateService::Stub* stub,
                                                      const std::string& ckpt_root) {
  auto ctx = [](const std::string& token) { return Ctx(token); };
  return {
      {"JobStatus",
       [=](const std::string& id, const std::string& token) {
         v1::JobStatusRequest req;
         req.set_job_id(id);
         v1::JobStatusResponse resp;
         return stub->JobStatus(ctx(token).get(), req, &resp);
       }},
      {"GradStats",
       [=](const std::string& id, const std::string& token) {
         v1::GradStatsRequest req;
         req.set_job_id(id);
         v1::GradStatsResponse resp;
         return stub->GradStats(ctx(token).get(), req, &resp);
       }},
      {"Step",
       [=](const std::string& id, const std::string& token) {
         v1::StepRequest req;
         req.set_job_id(id);
         req.set_lr(0.1f);
         v1::StepResponse resp;
         return stub->Step(ctx(token).get(), req, &resp);
       }},
      {"Gather",
       [=](const std::string& id, const std::string& token) {
         v1::GatherRequest req;
         req.set_job_id(id);
         req.set_dtype(v1::DTYPE_FP32);
         auto c = ctx(token);
         auto reader = stub->Gather(c.get(), req);
         v1::Chunk chunk;
         while (reader->Read(&chunk)) {
         }
         return reader->Finish();
       }},
      {"PushGradients",
       [=](const std::string& id, const std::string& token) {
         v1::PushResponse resp;
         auto c = ctx(token);
         auto writer = stub->PushGradients(c.get(), &resp);
         v1::Chunk chunk;
         chunk.set_job_id(id);
         chunk.set_dtype(v1::DTYPE_FP32);
         chunk.set_data(std::string(4096, '\0'));
         writer->Write(chunk);
         writer->WritesDone();
         return writer->Finish();
       }},
      {"Checkpoint",
       [=](const std::string& id, const std::string& token) {
         v1::CheckpointRequest req;
         req.set_job_id(id);
         req.set_root(ckpt_root);
         v1::CheckpointResponse resp;
         return stub->Checkpoint(ctx(token).get(), req, &resp);
       }},
      {"DeleteJob",
       [=](const std::string& id, const std::string& token) {
         v1::DeleteJobRequest req;
         req.set_job_id(id);
         v1::DeleteJobResponse resp;
         return stub->DeleteJob(ctx(token).get(), req, &resp);
       }},
  };
}

void ExpectCode(const grpc::Status& s, grpc::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
}

TEST_F(AuthTest, RegisterWithoutTokenReturnsAGeneratedOneThatEveryCallNeeds) {
  StartServer({});
  v1::RegisterJobResponse resp;
  ASSERT_TRUE(Register("gen", "", &resp).ok());
  const std::string token = resp.token();
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  EXPECT_TRUE(Status("gen", token).ok());
  ExpectCode(Status("gen", ""), grpc::StatusCode::UNAUTHENTICATED, "no job token");
  ExpectCode(Status("gen", kUnknownToken), grpc::StatusCode::UNAUTHENTICATED, "not valid");
  // Attaching with the token: the job as it is, and no token in the answer.
  v1::RegisterJobResponse again;
  ASSERT_TRUE(Register("gen", token, &again).ok());
  EXPECT_FALSE(again.created());
  EXPECT_TRUE(again.token().empty());
  // Another job gets another token.
  v1::RegisterJobResponse other;
  ASSERT_TRUE(Register("gen2", "", &other).ok());
  EXPECT_EQ(other.token().size(), 64u);
  EXPECT_NE(other.token(), token);
}

TEST_F(AuthTest, AChosenTokenIsTheJobsToken) {
  StartServer({});
  v1::RegisterJobResponse resp;
  ASSERT_TRUE(Register("chosen", kTokenA, &resp).ok());
  EXPECT_TRUE(resp.token().empty());
  EXPECT_TRUE(Status("chosen", kTokenA).ok());
}

TEST_F(AuthTest, EveryCallAnswersTheSameWhetherOrNotTheJobExists) {
  StartServer({});
  ASSERT_TRUE(Register("a", kTokenA).ok());
  ASSERT_TRUE(Register("b", kTokenB).ok());
  const std::string root = ::testing::TempDir() + "auth_ckpt";
  // Job ids appear in the messages as the caller wrote them: compare the
  // answers with the id blanked.
  auto blank = [](const grpc::Status& s, const std::string& id) {
    return absl::StrReplaceAll(Answer(s), {{"'" + id + "'", "'?'"}});
  };
  for (const auto& [method, call] : JobCalls(stub_.get(), root)) {
    SCOPED_TRACE(method);
    // Another job's token: PERMISSION_DENIED for job b (exists) and ghost (does not).
    grpc::Status existing = call("b", kTokenA), missing = call("ghost", kTokenA);
    ExpectCode(existing, grpc::StatusCode::PERMISSION_DENIED, "does not grant access to job 'b'");
    EXPECT_EQ(blank(existing, "b"), blank(missing, "ghost"));
    // A token no job has, or none: UNAUTHENTICATED, word for word the same.
    existing = call("b", kUnknownToken);
    missing = call("ghost", kUnknownToken);
    ExpectCode(existing, grpc::StatusCode::UNAUTHENTICATED, "not valid on this server");
    EXPECT_EQ(Answer(existing), Answer(missing));
    existing = call("b", "");
    missing = call("ghost", "");
    ExpectCode(existing, grpc::StatusCode::UNAUTHENTICATED, "zerostate-job-token");
    EXPECT_EQ(Answer(existing), Answer(missing));
  }
  EXPECT_TRUE(Status("b", kTokenB).ok()) << "job b must be untouched";
  EXPECT_FALSE(std::filesystem::exists(root + "/b")) << "nothing checkpointed";
}

// Ids are unique per server: whatever the caller's token, registering a
// taken id says that it is taken (docs/operations.md, "Job tokens").
TEST_F(AuthTest, RegisteringAnExistingJobWithAnotherTokenSaysTheIdIsTaken) {
  StartServer({});
  ASSERT_TRUE(Register("a", kTokenA).ok());
  ASSERT_TRUE(Register("b", kTokenB).ok());
  ExpectCode(Register("a", kTokenB), grpc::StatusCode::ALREADY_EXISTS, "job 'a' is taken");
  ExpectCode(Register("a", kUnknownToken), grpc::StatusCode::ALREADY_EXISTS, "job 'a' is taken");
  ExpectCode(Register("a", ""), grpc::StatusCode::UNAUTHENTICATED, "no job token");
  EXPECT_TRUE(Status("a", kTokenA).ok());
  ExpectCode(Status("a", kTokenB), grpc::StatusCode::PERMISSION_DENIED, "job 'a'");
}

TEST_F(AuthTest, DeleteNeedsTheJobsTokenAndTakesTheTokenAway) {
  StartServer({});
  ASSERT_TRUE(Register("a", kTokenA).ok());
  ASSERT_TRUE(Register("b", kTokenB).ok());
  v1::DeleteJobRequest req;
  req.set_job_id("a");
  v1::DeleteJobResponse resp;
  ExpectCode(stub_->DeleteJob(Ctx(kTokenB).get(), req, &resp), grpc::StatusCode::PERMISSION_DENIED,
             "job 'a'");
  EXPECT_TRUE(Status("a", kTokenA).ok()) << "a refused delete must leave the job";
  ASSERT_TRUE(stub_->DeleteJob(Ctx(kTokenA).get(), req, &resp).ok());
  EXPECT_TRUE(resp.deleted());
  ExpectCode(Status("a", kTokenA), grpc::StatusCode::UNAUTHENTICATED, "not valid");
  // A retry of the delete with the job's token is answered, not refused;
  // anyone else still learns nothing.
  ASSERT_TRUE(stub_->DeleteJob(Ctx(kTokenA).get(), req, &resp).ok());
  EXPECT_FALSE(resp.deleted());
  ExpectCode(stub_->DeleteJob(Ctx(kTokenB).get(), req, &resp), grpc::StatusCode::PERMISSION_DENIED,
             "job 'a'");
  ExpectCode(stub_->DeleteJob(Ctx(kUnknownToken).get(), req, &resp),
             grpc::StatusCode::UNAUTHENTICATED, "not valid");
}

TEST_F(AuthTest, RestoreNeedsTheTokenOfTheJobItReplacesAndANewJobTakesTheCallers) {
  StartServer({});
  const std::string root = ::testing::TempDir() + "auth_restore";
  std::filesystem::remove_all(root);
  ASSERT_TRUE(Register("a", kTokenA).ok());
  ASSERT_TRUE(Register("b", kTokenB).ok());
  v1::CheckpointRequest creq;
  creq.set_job_id("a");
  creq.set_root(root);
  v1::CheckpointResponse cresp;
  ASSERT_TRUE(stub_->Checkpoint(Ctx(kTokenA).get(), creq, &cresp).ok());
  v1::RestoreRequest rreq;
  rreq.set_path(cresp.path());
  rreq.add_servers(server_->address());
  v1::RestoreResponse rresp;
  ExpectCode(stub_->Restore(Ctx(kTokenB).get(), rreq, &rresp), grpc::StatusCode::PERMISSION_DENIED,
             "job 'a'");
  ExpectCode(stub_->Restore(Ctx("").get(), rreq, &rresp), grpc::StatusCode::UNAUTHENTICATED,
             "no job token");
  ASSERT_TRUE(stub_->Restore(Ctx(kTokenA).get(), rreq, &rresp).ok());
  // Deleted, then restored by a caller with a new token: the job takes it.
  v1::DeleteJobRequest dreq;
  dreq.set_job_id("a");
  v1::DeleteJobResponse dresp;
  ASSERT_TRUE(stub_->DeleteJob(Ctx(kTokenA).get(), dreq, &dresp).ok());
  ASSERT_TRUE(stub_->Restore(Ctx(kUnknownToken).get(), rreq, &rresp).ok());
  EXPECT_TRUE(rresp.token().empty());
  EXPECT_TRUE(Status("a", kUnknownToken).ok());
  ExpectCode(Status("a", kTokenA), grpc::StatusCode::UNAUTHENTICATED, "not valid");
  // Restored without a token: one is generated and returned.
  ASSERT_TRUE(stub_->DeleteJob(Ctx(kUnknownToken).get(), dreq, &dresp).ok());
  ASSERT_TRUE(stub_->Restore(Ctx("").get(), rreq, &rresp).ok());
  EXPECT_EQ(rresp.token().size(), 64u);
  EXPECT_TRUE(Status("a", rresp.token()).ok());
  std::filesystem::remove_all(root);
}

TEST_F(AuthTest, RendezvousNeedsATokenAndOnlyHoldersOfTheSameTokenMeet) {
  StartServer({});
  auto join = [&](const std::string& token, const std::string& value,
                  v1::RendezvousResponse* resp) {
    v1::RendezvousRequest req;
    req.set_job_id("ns");
    req.set_key("k");
    req.set_world(1);
    req.set_value(value);
    return stub_->Rendezvous(Ctx(token).get(), req, resp);
  };
  v1::RendezvousResponse resp;
  ExpectCode(join("", "x", &resp), grpc::StatusCode::UNAUTHENTICATED, "needs the job's token");
  ASSERT_TRUE(join(kTokenA, "x", &resp).ok());
  ASSERT_EQ(resp.values_size(), 1);
  EXPECT_EQ(resp.values(0), "x");
  // Same namespace and key under another token: a separate rendezvous, so
  // rank 0's other value is no conflict and holder A's value is not seen.
  v1::RendezvousResponse other;
  ASSERT_TRUE(join(kTokenB, "y", &other).ok());
  ASSERT_EQ(other.values_size(), 1);
  EXPECT_EQ(other.values(0), "y");
  ExpectCode(join(kTokenA, "y", &resp), grpc::StatusCode::INVALID_ARGUMENT, "another value");
}

TEST_F(AuthTest, MalformedTokenIsRefusedWithoutEchoingIt) {
  StartServer({});
  ASSERT_TRUE(Register("a", kTokenA).ok());
  grpc::Status s = Status("a", "short-secret");
  ExpectCode(s, grpc::StatusCode::UNAUTHENTICATED, "32 to 256 printable characters");
  ExpectCode(Status("a", "token with spaces 0123456789abcdef0123456"),
             grpc::StatusCode::UNAUTHENTICATED, "this one has other characters");
  EXPECT_EQ(s.error_message().find("short-secret"), std::string::npos) << s.error_message();
  ExpectCode(Register("c", "short-secret"), grpc::StatusCode::UNAUTHENTICATED, "this one has 12");
  ExpectCode(Status("c", kTokenA), grpc::StatusCode::PERMISSION_DENIED, "job 'c'");
}

TEST_F(AuthTest, TokensAppearNeitherInMetricsNorInTheLog) {
  StartServer({});
  v1::RegisterJobResponse resp;
  ASSERT_TRUE(Register("gen", "", &resp).ok());
  ASSERT_TRUE(Register("a", kTokenA).ok());
  const std::string generated = resp.token();
  const std::string malformed = "malformed-secret-x";
  for (const auto& [method, call] : JobCalls(stub_.get(), ::testing::TempDir() + "auth_log")) {
    (void)call("a", kTokenB);
    (void)call("a", malformed);
    (void)call("gen", kTokenA);
  }
  ASSERT_TRUE(Status("gen", generated).ok());
  const std::string metrics = Metrics(), log = Log();
  EXPECT_NE(metrics.find("zerostate_job_state_bytes{job_id=\"gen\"}"), std::string::npos) << metrics;
  EXPECT_NE(log.find("warning: --plaintext"), std::string::npos) << log;
  for (const std::string& secret :
       {generated, std::string(kTokenA), std::string(kTokenB), malformed}) {
    EXPECT_EQ(metrics.find(secret), std::string::npos) << "token in /metrics: " << secret;
    EXPECT_EQ(log.find(secret), std::string::npos) << "token in the log: " << secret;
  }
}

}  // namespace
}  // namespace zerostate::testing
