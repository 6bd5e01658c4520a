// Sizes a client without a valid token can send, against a real server
// process: request metadata is capped by gRPC itself, every string field is
// capped with INVALID_ARGUMENT that does not echo the value, and what a job
// holds (its spec, tensor names above all) counts in its RAM budget.
#include <string>

#include "tests/server/auth_fixture.h"

namespace zerostate::testing {
namespace {

// Large enough to show an echo, small enough for a quick test.
const std::string kHuge(16 << 20, 'x');
constexpr char kUnknownToken[] = "token-nobody-has-0123456789abcdef01234567";

using LimitsTest = AuthServerTest;

void ExpectRefusedShortly(const grpc::Status& s, const std::string& field) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().substr(0, 200);
  EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message().substr(0, 200);
  EXPECT_LT(s.error_message().size(), 300u) << "the value must not be echoed";
}

// gRPC refuses the headers before any handler (and any token check) runs;
// the server stays up for everyone else.
TEST_F(LimitsTest, MetadataOverTheCapIsRefusedByGrpc) {
  StartServer({});
  ASSERT_TRUE(Register("a", kTokenA).ok());
  auto ctx = Ctx("");
  ctx->AddMetadata("zerostate-job-token", std::string(1 << 20, 't'));
  v1::JobStatusRequest req;
  req.set_job_id("a");
  v1::JobStatusResponse resp;
  grpc::Status s = stub_->JobStatus(ctx.get(), req, &resp);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  auto padded = Ctx(kTokenA);
  padded->AddMetadata("x-padding", std::string(20 << 10, 'p'));  // over 16 KiB
  s = stub_->JobStatus(padded.get(), req, &resp);
  EXPECT_FALSE(s.ok()) << "20 KiB of metadata passed";
  // The refusal may close that connection (a call sent on it meanwhile is
  // answered UNAVAILABLE "Socket closed"); the server serves every other
  // client: one on a connection of its own (channels share connections
  // unless told not to).
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto other = v1::StateService::NewStub(grpc::CreateCustomChannel(
      server_->address(), grpc::InsecureChannelCredentials(), own_connection));
  s = other->JobStatus(Ctx(kTokenA).get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(LimitsTest, EveryStringFieldIsCappedWithoutEchoingIt) {
  StartServer({});
  ASSERT_TRUE(Register("a", kTokenA).ok());
  v1::JobStatusRequest status;
  status.set_job_id(kHuge);
  v1::JobStatusResponse status_resp;
  ExpectRefusedShortly(stub_->JobStatus(Ctx(kTokenA).get(), status, &status_resp), "job_id");
  ExpectRefusedShortly(stub_->JobStatus(Ctx(kUnknownToken).get(), status, &status_resp), "job_id");

  v1::RegisterJobRequest reg = JobRequest("b", server_->address());
  reg.mutable_spec()->mutable_tensors(0)->set_name(kHuge);
  v1::RegisterJobResponse reg_resp;
  ExpectRefusedShortly(stub_->RegisterJob(Ctx(kTokenB).get(), reg, &reg_resp), "tensors[0].name");
  reg = JobRequest("b", server_->address());
  reg.set_servers(0, kHuge);
  ExpectRefusedShortly(stub_->RegisterJob(Ctx(kTokenB).get(), reg, &reg_resp), "servers[0]");

  v1::CheckpointRequest ckpt;
  ckpt.set_job_id("a");
  ckpt.set_root("/" + kHuge);
  v1::CheckpointResponse ckpt_resp;
  ExpectRefusedShortly(stub_->Checkpoint(Ctx(kTokenA).get(), ckpt, &ckpt_resp), "root");

  v1::RestoreRequest restore;
  restore.set_job_id("a");
  restore.set_path("/" + kHuge);
  restore.add_servers(server_->address());
  v1::RestoreResponse restore_resp;
  ExpectRefusedShortly(stub_->Restore(Ctx(kTokenA).get(), restore, &restore_resp), "path");

  v1::RendezvousRequest meet;
  meet.set_job_id("a");
  meet.set_key(kHuge);
  meet.set_world(1);
  v1::RendezvousResponse meet_resp;
  ExpectRefusedShortly(stub_->Rendezvous(Ctx(kTokenA).get(), meet, &meet_resp), "key");
  meet.set_key("k");
  meet.set_job_id(kHuge);
  ExpectRefusedShortly(stub_->Rendezvous(Ctx(kTokenA).get(), meet, &meet_resp), "job_id");
  EXPECT_TRUE(Status("a", kTokenA).ok()) << "job a untouched";
}

// A non-ASCII character is named whole and escaped, not by its first byte.
TEST_F(LimitsTest, ANonAsciiJobIdIsReportedEscaped) {
  StartServer({});
  grpc::Status s = Register("j\xc3\xb6" "b", kTokenA);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("\"\\xc3\\xb6\" at byte 1"), std::string::npos)
      << s.error_message();
}

// Names are held by the job: 2000 tensors of 1000-byte names cost their
// bytes in the RAM budget like the state does.
TEST_F(LimitsTest, TensorNamesCountInTheJobsBudget) {
  StartServer({});
  auto request = [&](const std::string& id, size_t name_bytes) {
    v1::RegisterJobRequest req = JobRequest(id, server_->address(), 64);
    for (int i = 1; i < 2000; ++i) {
      auto* t = req.mutable_spec()->add_tensors();
      t->set_name(std::to_string(i) + std::string(name_bytes, 'n'));
      t->add_shape(1);
    }
    return req;
  };
  v1::RegisterJobResponse short_names, long_names;
  ASSERT_TRUE(stub_->RegisterJob(Ctx(kTokenA).get(), request("short", 1), &short_names).ok());
  ASSERT_TRUE(stub_->RegisterJob(Ctx(kTokenA).get(), request("long", 1000), &long_names).ok());
  EXPECT_GE(long_names.info().state_bytes(),
            short_names.info().state_bytes() + 1999ull * 999 * 3)
      << "the names' bytes are not counted";
}

}  // namespace
}  // namespace zerostate::testing
