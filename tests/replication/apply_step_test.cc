// ReplicaService.ApplyStep and SendSums (issue 19's way of a step to a
// backup: the sums on lanes, the step last) refuse bad input case by case,
// naming what is wrong, and the copy stays as it was. Real server
// processes: a job of two nodes on three servers with one backup per
// shard, two steps in; the calls go to server 1's backup copy of shard 0
// (whose primary is server 0). Good streamed steps, lanes included, are
// replication_test's (its servers run with --replica_lanes=3).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

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
  std::string Sum(uint64_t block) const {
    const auto& layout = run_.nodes[0]->layout();
    const uint64_t begin = block * layout.block_elems;
    const uint64_t required =
        std::min<uint64_t>(layout.block_elems, layout.used_elems - std::min(begin, layout.used_elems));
    return std::string(required * sizeof(float), '\0');
  }

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
  absl::Status SendSums(const std::vector<v1::ReplicaStepPart>& parts, bool with_token = true) {
    return Call<v1::SendSumsResponse>(parts, with_token, [](auto& stub, auto& ctx, auto& resp) {
      return stub.SendSums(&ctx, &resp);
    });
  }

  std::vector<uint64_t> blocks_;  // shard 0's
};

struct BadCall {
  const char* name;
  bool sums;  // SendSums, else ApplyStep
  std::function<void(std::vector<v1::ReplicaStepPart>&)> spoil;
  absl::StatusCode code;
  std::string message;
};

TEST_F(ApplyStepTest, BadStepsAndSumsAreRefusedNamingWhatIsWrongAndTheCopyStaysAsItWas) {
  const uint64_t end_block = blocks_.back() + 1;
  const std::string missing = absl::StrCat("grad: block ", blocks_[0], " of step 2 is missing");
  const std::vector<BadCall> cases = {
      {"ApplyStep without the step request", false, [](auto& p) { p.pop_back(); },
       absl::StatusCode::kInvalidArgument, "ended without the step request"},
      {"ApplyStep with two step requests", false,
       [](auto& p) { *p[0].mutable_step() = p.back().step(); }, absl::StatusCode::kInvalidArgument,
       "a second step request (step 2, after step 2)"},
      {"ApplyStep with a block outside the shard", false,
       [&](auto& p) { p[1].set_block(end_block); }, absl::StatusCode::kInvalidArgument,
       absl::StrCat("block: ", end_block, " is not in shard 0")},
      {"ApplyStep with a block missing", false, [](auto& p) { p.erase(p.begin() + 1); },
       absl::StatusCode::kInvalidArgument, missing},
      {"ApplyStep with a sum of the wrong size", false,
       [](auto& p) { p[1].mutable_grad()->pop_back(); }, absl::StatusCode::kInvalidArgument,
       "bytes (or came twice)"},
      {"ApplyStep of a transfer whose lanes left nothing", false,
       [](auto& p) {
         p[0].set_transfer(77);
         p.erase(p.begin() + 1);
       },
       absl::StatusCode::kInvalidArgument, missing},
      {"ApplyStep of a step the copy is not at", false,
       [](auto& p) { p.back().mutable_step()->set_step(kVersion + 3); },
       absl::StatusCode::kFailedPrecondition, "needs a catch-up"},
      {"ApplyStep of a shard this server holds no copy of", false,
       [](auto& p) { p[0].set_shard(2); }, absl::StatusCode::kNotFound, "shard 2"},
      {"SendSums with transfer 0", true, [](auto& p) { p.pop_back(); },
       absl::StatusCode::kInvalidArgument, "transfer must not be 0"},
      {"SendSums with a block outside the shard", true,
       [&](auto& p) {
         p[0].set_transfer(78);
         p.pop_back();
         p[1].set_block(end_block);
       },
       absl::StatusCode::kInvalidArgument,
       absl::StrCat("block ", end_block, " is outside shard 0")},
      {"SendSums with more sums than the shard has blocks", true,
       [](auto& p) {
         p[0].set_transfer(79);
         p.back() = p[1];
         p.push_back(p[1]);
       },
       absl::StatusCode::kInvalidArgument, "came once too many"},
      {"SendSums of a shard this server holds no copy of", true,
       [](auto& p) {
         p[0].set_transfer(80);
         p[0].set_shard(2);
       },
       absl::StatusCode::kNotFound, "shard 2"},
  };
  for (const BadCall& c : cases) {
    std::vector<v1::ReplicaStepPart> parts = Streamed();
    c.spoil(parts);
    absl::Status s = c.sums ? SendSums(parts) : ApplyStep(parts);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s;
  }
  // Without the job's token.
  absl::Status s = ApplyStep(Streamed(), /*with_token=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  std::vector<v1::ReplicaStepPart> lane = Streamed(81);
  lane.pop_back();
  s = SendSums(lane, /*with_token=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  // A lane whose step never comes: its sums are kept, applied to nothing.
  EXPECT_TRUE(SendSums(lane).ok());
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
  // Nothing changed: the backup still equals the primary, and steps go on
  // (the next one's transfer replaces the sums kept under 81).
  ExpectSameCopies(servers_[0], servers_[1], "applied", 0, kVersion);
  ASSERT_TRUE(RunStep(run_.nodes, kVersion).ok());
  ExpectSameCopies(servers_[0], servers_[1], "applied", 0, kVersion + 1);
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
