// ReplicaService.ApplyStep and the data plane's REPLICA_SUM frames (issue
// 19's way of a step to a backup: the sums ahead on the backup's data
// plane, the step on ApplyStep) refuse bad input case by case, naming what
// is wrong, and the copy stays as it was. Real server processes: a job of
// two nodes on three servers with one backup per shard, two steps in; the
// calls go to server 1's backup copy of shard 0 (whose primary is server
// 0). Good streamed steps, lanes included, are replication_test's (its
// servers run with --replica_lanes=3).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "client/data_conn.h"
#include "common/frame_io.h"
#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

constexpr uint64_t kVersion = 2;

class ApplyStepTest : public ReplicaCallTest {
 protected:
  void SetUp() override {
    StartSteppedJob("applied", kVersion);
    for (const v1::ShardBlock& b : primary_.blocks) blocks_.push_back(b.block());
  }

  // A block's summed gradient of the right size (zeros).
  std::string Sum(uint64_t block) const { return ZeroSum(run_.nodes[0]->layout(), block); }

  // A streamed step of shard 0 at kVersion: job and shard first (with
  // `transfer`), every block's sum, the request last.
  std::vector<v1::ReplicaStepPart> Streamed(uint64_t transfer = 0) const {
    std::vector<v1::ReplicaStepPart> parts(1);
    parts[0].set_job_id("applied");
    parts[0].set_shard(0);
    parts[0].set_transfer(transfer);
    for (uint64_t b : blocks_) {
      v1::ReplicaStepPart& p = parts.emplace_back();
      p.set_block(b);
      p.set_grad(Sum(b));
    }
    v1::StepRequest& req = *parts.emplace_back().mutable_step();
    req.set_job_id("applied");
    req.set_step(kVersion);
    req.set_lr(0.01f);
    return parts;
  }

  template <class Response, class Open>
  absl::Status Call(const std::vector<v1::ReplicaStepPart>& parts, bool with_token, Open open) {
    auto stub = v1::ReplicaService::NewStub(
        grpc::CreateChannel(servers_[1], grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    if (with_token) ctx.AddMetadata("zerostate-job-token", kTestJobToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    Response resp;
    auto writer = open(*stub, ctx, resp);
    for (const v1::ReplicaStepPart& p : parts) {
      if (!writer->Write(p)) break;
    }
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  absl::Status ApplyStep(const std::vector<v1::ReplicaStepPart>& parts, bool with_token = true) {
    return Call<v1::ReplicaStepResponse>(parts, with_token, [](auto& stub, auto& ctx, auto& resp) {
      return stub.ApplyStep(&ctx, &resp);
    });
  }

  // A connection to the data plane of server `index`.
  std::unique_ptr<client::DataConn> DataConn(int index) {
    return DataConnTo(servers_[index], "applied");
  }

  // A good REPLICA_SUM of shard 0's `block` under `transfer`.
  v1::ReplicaSum SumOf(uint64_t block, uint64_t transfer) const {
    v1::ReplicaSum sum;
    sum.set_job_id("applied");
    sum.set_shard(0);
    sum.set_transfer(transfer);
    sum.set_block(block);
    return sum;
  }

  static absl::Status SendSum(client::DataConn& conn, const std::string& token,
                              const v1::ReplicaSum& sum, const std::string& bytes) {
    return SendReplicaSum(conn, token, sum, bytes);
  }

  std::vector<uint64_t> blocks_;  // shard 0's
};

struct BadCall {
  const char* name;
  std::function<void(std::vector<v1::ReplicaStepPart>&)> spoil;
  absl::StatusCode code;
  std::string message;
};

TEST_F(ApplyStepTest, BadStepsAreRefusedNamingWhatIsWrongAndTheCopyStaysAsItWas) {
  const uint64_t end_block = blocks_.back() + 1;
  const std::string missing = absl::StrCat("grad: block ", blocks_[0], " of step 2 is missing");
  const std::vector<BadCall> cases = {
      {"ApplyStep without the step request", [](auto& p) { p.pop_back(); },
       absl::StatusCode::kInvalidArgument, "ended without the step request"},
      {"ApplyStep with two step requests", [](auto& p) { *p[0].mutable_step() = p.back().step(); },
       absl::StatusCode::kInvalidArgument, "a second step request (step 2, after step 2)"},
      {"ApplyStep with a block outside the shard", [&](auto& p) { p[1].set_block(end_block); },
       absl::StatusCode::kInvalidArgument,
       absl::StrCat("block: ", end_block, " is not in shard 0")},
      {"ApplyStep with a block missing", [](auto& p) { p.erase(p.begin() + 1); },
       absl::StatusCode::kInvalidArgument, missing},
      {"ApplyStep with a sum of the wrong size", [](auto& p) { p[1].mutable_grad()->pop_back(); },
       absl::StatusCode::kInvalidArgument, "bytes (or came twice)"},
      {"ApplyStep of a transfer whose sums are not here",
       [](auto& p) {
         p[0].set_transfer(77);
         p.erase(p.begin() + 1);
       },
       absl::StatusCode::kInvalidArgument, missing},
      {"ApplyStep of a step the copy is not at",
       [](auto& p) { p.back().mutable_step()->set_step(kVersion + 3); },
       absl::StatusCode::kFailedPrecondition, "needs a catch-up"},
      {"ApplyStep of a shard this server holds no copy of", [](auto& p) { p[0].set_shard(2); },
       absl::StatusCode::kNotFound, "shard 2"},
      // A deposed primary's step: the copy accepted server 0's term, whose
      // epoch (StaticMembership: its claim's time) is far above 1.
      {"ApplyStep of a term older than the one the copy accepted",
       [](auto& p) {
         p[0].mutable_term()->set_primary("deposed:1");
         p[0].mutable_term()->set_epoch(1);
       },
       absl::StatusCode::kAborted,
       "a step from primary deposed:1 (epoch 1) is refused: this copy accepted primary "},
      {"ApplyStep with a term without an epoch",
       [](auto& p) { p[0].mutable_term()->set_primary("deposed:1"); },
       absl::StatusCode::kInvalidArgument, "a term names its primary and has an epoch above 0"},
  };
  for (const BadCall& c : cases) {
    std::vector<v1::ReplicaStepPart> parts = Streamed();
    c.spoil(parts);
    absl::Status s = ApplyStep(parts);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s;
  }
  // Without the job's token.
  absl::Status s = ApplyStep(Streamed(), /*with_token=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  // To the shard's primary, which takes no step from another: ABORTED,
  // the sender is no longer the primary (it fences itself).
  auto primary = v1::ReplicaService::NewStub(
      grpc::CreateChannel(servers_[0], grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("zerostate-job-token", kTestJobToken);
    v1::ReplicaStepResponse resp;
    auto writer = primary->ApplyStep(&ctx, &resp);
    for (const v1::ReplicaStepPart& p : Streamed()) {
      if (!writer->Write(p)) break;
    }
    writer->WritesDone();
    grpc::Status g = writer->Finish();
    EXPECT_EQ(g.error_code(), grpc::StatusCode::ABORTED) << g.error_message();
    EXPECT_NE(g.error_message().find("shard 0 of job 'applied' has a newer primary: this server"),
              std::string::npos)
        << g.error_message();
    EXPECT_NE(g.error_message().find("a step from another is refused"), std::string::npos)
        << g.error_message();
  }
  // Nothing changed: the backup still equals the primary, and steps go on.
  ExpectSameCopies(servers_[0], servers_[1], "applied", 0, kVersion);
  ASSERT_TRUE(RunStep(run_.nodes, kVersion).ok());
  ExpectSameCopies(servers_[0], servers_[1], "applied", 0, kVersion + 1);
}

struct BadSum {
  const char* name;
  std::function<void(std::string& token, v1::ReplicaSum& sum, std::string& bytes)> spoil;
  absl::StatusCode code;
  std::string message;
};

// REPLICA_SUM frames on a backup's data plane: each bad one is answered
// with what was wrong (the connection stays usable), and nothing it
// carried is kept or applied.
TEST_F(ApplyStepTest, BadReplicaSumsAreRefusedNamingWhatIsWrongAndTheCopyStaysAsItWas) {
  const uint64_t end_block = blocks_.back() + 1;
  const std::vector<BadSum> cases = {
      {"without the job's token", [](auto& token, auto&, auto&) { token.clear(); },
       absl::StatusCode::kUnauthenticated, ""},
      {"with another token", [](auto& token, auto&, auto&) { token = "not-the-job-token-at-all"; },
       absl::StatusCode::kUnauthenticated, ""},
      {"transfer 0", [](auto&, auto& sum, auto&) { sum.set_transfer(0); },
       absl::StatusCode::kInvalidArgument, "transfer must not be 0"},
      {"a block outside the shard", [&](auto&, auto& sum, auto&) { sum.set_block(end_block); },
       absl::StatusCode::kInvalidArgument,
       absl::StrCat("block ", end_block, " is outside shard 0")},
      {"a sum of the wrong size", [](auto&, auto&, auto& bytes) { bytes.pop_back(); },
       absl::StatusCode::kInvalidArgument, "bytes of sum; it needs"},
      {"a shard this server holds no copy of", [](auto&, auto& sum, auto&) { sum.set_shard(2); },
       absl::StatusCode::kNotFound, "shard 2"},
      {"another job", [](auto&, auto& sum, auto&) { sum.set_job_id("no-such-job"); },
       absl::StatusCode::kPermissionDenied, "does not grant access to job 'no-such-job'"},
      {"a term older than the one the copy accepted",
       [](auto&, auto& sum, auto&) {
         sum.mutable_term()->set_primary("deposed:1");
         sum.mutable_term()->set_epoch(1);
       },
       absl::StatusCode::kAborted,
       "a step's sum from primary deposed:1 (epoch 1) is refused: this copy accepted primary "},
  };
  std::unique_ptr<client::DataConn> conn = DataConn(1);
  ASSERT_NE(conn, nullptr);
  for (const BadSum& c : cases) {
    std::string token = kTestJobToken;
    v1::ReplicaSum sum = SumOf(blocks_[0], 90);
    std::string bytes = Sum(blocks_[0]);
    c.spoil(token, sum, bytes);
    absl::Status s = SendSum(*conn, token, sum, bytes);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s;
  }
  // A block twice in one transfer: the second is refused.
  ASSERT_TRUE(SendSum(*conn, kTestJobToken, SumOf(blocks_[0], 91), Sum(blocks_[0])).ok());
  absl::Status twice = SendSum(*conn, kTestJobToken, SumOf(blocks_[0], 91), Sum(blocks_[0]));
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
  EXPECT_NE(twice.message().find("came twice in transfer 91"), std::string::npos) << twice;
  // To the shard's primary, which takes no sums from another: ABORTED, as
  // ApplyStep's.
  std::unique_ptr<client::DataConn> to_primary = DataConn(0);
  ASSERT_NE(to_primary, nullptr);
  absl::Status primary =
      SendSum(*to_primary, kTestJobToken, SumOf(blocks_[0], 92), Sum(blocks_[0]));
  EXPECT_EQ(primary.code(), absl::StatusCode::kAborted) << primary;
  EXPECT_NE(primary.message().find("shard 0 of job 'applied' has a newer primary: this server"),
            std::string::npos)
      << primary;
  EXPECT_NE(primary.message().find("a step's sum from another is refused"), std::string::npos)
      << primary;
  // The sums of transfer 91, whose step never came, are applied to
  // nothing: the backup still equals the primary, and the steps go on (the
  // next one's transfer replaces them).
  ExpectSameCopies(servers_[0], servers_[1], "applied", 0, kVersion);
  ASSERT_TRUE(RunStep(run_.nodes, kVersion).ok());
  ExpectSameCopies(servers_[0], servers_[1], "applied", 0, kVersion + 1);
}

// The sums of a step that never came are kept (the gauge
// zerostate_replica_kept_sum_bytes counts them) until the job is deleted,
// which frees them; the steps' own sums were taken by their ApplySteps.
TEST_F(ApplyStepTest, ADeletedJobsKeptSumsAreFreed) {
  const char* gauge = "zerostate_replica_kept_sum_bytes";
  EXPECT_EQ(ServerMetric(cluster_->server(1), gauge), 0);
  std::unique_ptr<client::DataConn> conn = DataConn(1);
  ASSERT_NE(conn, nullptr);
  double kept = 0;
  for (uint64_t b : blocks_) {
    ASSERT_TRUE(SendSum(*conn, kTestJobToken, SumOf(b, 93), Sum(b)).ok()) << "block " << b;
    kept += Sum(b).size();
  }
  EXPECT_EQ(ServerMetric(cluster_->server(1), gauge), kept);
  ASSERT_TRUE(run_.nodes[0]->Delete().ok());
  EXPECT_EQ(ServerMetric(cluster_->server(1), gauge), 0);
}

// --replica_lanes out of range or not a number: the server does not start
// and says which flag.
TEST(ReplicaLanesFlagTest, BadValuesAreRefusedNamingTheFlag) {
  const std::vector<std::string> bad = {"-1", "17", "many"};
  for (const std::string& value : bad) {
    const std::string log = ::testing::TempDir() + "replica-lanes-" + value + ".log";
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--replica_lanes=" + value);
    o.stderr_path = log;
    EXPECT_FALSE(ServerProcess::Start(o).ok()) << value << " was accepted";
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("replica_lanes"), std::string::npos) << value << ": " << text;
    std::remove(log.c_str());
  }
}

}  // namespace
}  // namespace zerostate::testing
