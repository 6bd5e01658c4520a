// ReplicaService.Seed (the catch-up of a lost copy) refuses bad input case by
// case, naming what is wrong, and leaves the copy as it was; a good Seed
// is accepted. Real server processes: a job of two nodes on three servers
// with one backup per shard, two steps in; the seeds go to server 1's
// backup copy of shard 0 (whose primary is server 0).
#include "tests/replication/replication_fixture.h"

namespace zerostate::testing {
namespace {

constexpr uint64_t kVersion = 2;

class SeedTest : public ReplicaCallTest {
 protected:
  void SetUp() override { StartSteppedJob("seeded", kVersion); }

  // A good Seed of shard 0 for server 1: the primary's copy.
  std::vector<v1::SeedPart> GoodSeed() const {
    std::vector<v1::SeedPart> parts(1);
    v1::SeedPart& first = parts[0];
    first.set_job_id("seeded");
    first.set_shard(0);
    *first.mutable_registration()->mutable_spec() = run_.nodes[0]->spec();
    for (const std::string& s : servers_) first.mutable_registration()->add_servers(s);
    first.mutable_registration()->set_shard_index(1);
    first.set_version(kVersion);
    first.set_applied_steps(primary_.applied_steps[0]);
    for (const v1::ShardBlock& b : primary_.blocks) *parts.emplace_back().mutable_block() = b;
    return parts;
  }

  absl::Status Seed(const std::string& server, const std::vector<v1::SeedPart>& parts,
                    bool with_token = true) {
    auto stub = v1::ReplicaService::NewStub(
        grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    if (with_token) ctx.AddMetadata("zerostate-job-token", kTestJobToken);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::SeedResponse resp;
    auto writer = stub->Seed(&ctx, &resp);
    for (const v1::SeedPart& p : parts) {
      if (!writer->Write(p)) break;
    }
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }

};

struct BadSeed {
  const char* name;
  std::function<void(std::vector<v1::SeedPart>&)> spoil;
  absl::StatusCode code;
  std::string message;
};

TEST_F(SeedTest, BadSeedsAreRefusedNamingWhatIsWrongAndTheCopyStaysAsItWas) {
  const uint64_t end_block = primary_.blocks.back().block() + 1;
  const std::vector<BadSeed> cases = {
      {"job_id other than the registration's",
       [](auto& p) { p[0].mutable_registration()->mutable_spec()->set_job_id("other"); },
       absl::StatusCode::kInvalidArgument, "registration.spec.job_id 'other' is not job_id 'seeded'"},
      {"block outside the shard",
       [&](auto& p) { p[1].mutable_block()->set_block(end_block); },
       absl::StatusCode::kInvalidArgument, absl::StrCat("block ", end_block, " is outside shard 0")},
      {"block twice", [](auto& p) { p[2] = p[1]; }, absl::StatusCode::kInvalidArgument,
       "came twice"},
      {"block missing", [](auto& p) { p.pop_back(); }, absl::StatusCode::kInvalidArgument,
       "is missing"},
      {"state of the wrong size",
       [](auto& p) { p[1].mutable_block()->mutable_state()->pop_back(); },
       absl::StatusCode::kInvalidArgument, "bytes of state, not"},
      {"block at another version",
       [](auto& p) { p[1].mutable_block()->set_version(kVersion + 1); },
       absl::StatusCode::kInvalidArgument, "is at version 3, not the shard's 2"},
      {"more applied steps than the version",
       [](auto& p) { p[0].set_applied_steps(kVersion + 1); }, absl::StatusCode::kInvalidArgument,
       "applied_steps 3 exceed version 2"},
      {"a shard this server holds no copy of", [](auto& p) { p[0].set_shard(2); },
       absl::StatusCode::kNotFound, "shard 2"},
      // A deposed primary's catch-up: the copy accepted server 0's term,
      // whose epoch (StaticMembership: its claim's time) is far above 1.
      {"a term older than the one the copy accepted",
       [](auto& p) {
         p[0].mutable_term()->set_primary("deposed:1");
         p[0].mutable_term()->set_epoch(1);
       },
       absl::StatusCode::kAborted,
       "a catch-up from primary deposed:1 (epoch 1) is refused: this copy accepted primary "},
      {"a term without an epoch", [](auto& p) { p[0].mutable_term()->set_primary("deposed:1"); },
       absl::StatusCode::kInvalidArgument, "a term names its primary and has an epoch above 0"},
  };
  for (const BadSeed& c : cases) {
    std::vector<v1::SeedPart> parts = GoodSeed();
    c.spoil(parts);
    absl::Status s = Seed(servers_[1], parts);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.name << ": " << s;
  }
  // Without the job's token.
  absl::Status s = Seed(servers_[1], GoodSeed(), /*with_token=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  // To the shard's primary, which takes no state from another: ABORTED,
  // the sender is no longer the primary.
  std::vector<v1::SeedPart> to_primary = GoodSeed();
  to_primary[0].mutable_registration()->set_shard_index(0);
  s = Seed(servers_[0], to_primary);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("shard 0 of job 'seeded' has a newer primary: this server"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("a catch-up from another is refused"), std::string::npos) << s;
  // Nothing changed: the backup still equals the primary, and steps go on.
  ExpectSameCopies(servers_[0], servers_[1], "seeded", 0, kVersion);
  // A good Seed (the copy's own state again) is accepted, and the next
  // step reaches it as before.
  EXPECT_TRUE(Seed(servers_[1], GoodSeed()).ok());
  ASSERT_TRUE(RunStep(run_.nodes, kVersion).ok());
  ExpectSameCopies(servers_[0], servers_[1], "seeded", 0, kVersion + 1);
}

}  // namespace
}  // namespace zerostate::testing
