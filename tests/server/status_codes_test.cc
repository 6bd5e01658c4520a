// The status code of each RPC's documented failures
// (proto/zerostate/v1/state_service.proto, the "Errors:" of each rpc),
// against a real zerostate-server process over loopback: through the
// generated stubs, and for the calls the TCP data plane carries (PUSH and
// GATHER frames) through raw frames too. One row per documented failure;
// a row names the RPC, the failure as the proto words it and the code.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/data_conn.h"
#include "common/frame_io.h"
#include "tests/testing/grad_chunk.h"
#include "tests/testing/server_process.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate {
namespace {

constexpr uint32_t kBlock = 256;
constexpr uint32_t kBlocks = 2;
constexpr char kToken[] = "status-codes-test-token-0123456789abcdef";
constexpr char kOtherToken[] = "status-codes-other-token-0123456789abcde";
constexpr char kNobodysToken[] = "status-codes-nobodys-token-0123456789ab";

// A fp32 job of kBlocks blocks and two nodes on `server` alone.
v1::RegisterJobRequest JobRequest(const std::string& job, const std::string& server,
                                  uint32_t elems = kBlocks * kBlock) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id(job);
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(elems);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->set_num_nodes(2);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_FP32);
  spec->set_block_elems(kBlock);
  spec->set_seed(5);
  req.add_servers(server);
  req.set_shard_index(0);
  return req;
}

v1::Chunk GradChunk(const std::string& job, uint64_t step, uint32_t node, uint64_t block,
                    uint32_t elems = kBlock) {
  return testing::Fp32GradChunk(job, step, node, block, std::vector<float>(elems, 0.0f));
}

// What a call answered: its code and message.
struct Answer {
  absl::StatusCode code;
  std::string message;
};

Answer Of(const grpc::Status& s) {
  return {static_cast<absl::StatusCode>(s.error_code()), s.error_message()};
}

// One documented failure of one RPC: the call that provokes it, and the
// code the proto documents for it.
struct Row {
  std::string rpc;      // "Step", "PUSH frame", ...
  std::string failure;  // as the proto's error list words it
  absl::StatusCode code;
  std::function<Answer()> call;
};

class StatusCodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ServerProcessOptions opt;
    opt.binary = ZEROSTATE_SERVER_PATH;
    opt.args = {"--metrics_listen=", "--data_listen=127.0.0.1:0", "--threads=1",
                "--ram_budget_bytes=50000000", "--grace_seconds=1"};
    auto server = testing::ServerProcess::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::StateService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    dir_ = absl::StrCat(::testing::TempDir(), "status_codes.", getpid());
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(std::filesystem::create_directories(dir_));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token = kToken,
                                               absl::Duration timeout = absl::Seconds(30)) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!token.empty()) ctx->AddMetadata("zerostate-job-token", token);
    return ctx;
  }

  Answer Register(const v1::RegisterJobRequest& req, const std::string& token = kToken) {
    v1::RegisterJobResponse resp;
    return Of(stub_->RegisterJob(Context(token).get(), req, &resp));
  }
  Answer Push(const std::vector<v1::Chunk>& chunks, const std::string& token = kToken) {
    v1::PushResponse resp;
    auto ctx = Context(token);
    auto writer = stub_->PushGradients(ctx.get(), &resp);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return Of(writer->Finish());
  }
  Answer Init(const v1::Chunk& c, const std::string& token = kToken) {
    v1::InitWeightsResponse resp;
    auto ctx = Context(token);
    auto writer = stub_->InitWeights(ctx.get(), &resp);
    writer->Write(c);
    writer->WritesDone();
    return Of(writer->Finish());
  }
  Answer Stats(const std::string& job, uint64_t step, const std::string& token = kToken,
               absl::Duration timeout = absl::Seconds(30)) {
    v1::GradStatsRequest req;
    req.set_job_id(job);
    req.set_step(step);
    v1::GradStatsResponse resp;
    return Of(stub_->GradStats(Context(token, timeout).get(), req, &resp));
  }
  static v1::StepRequest StepReq(const std::string& job, uint64_t step) {
    v1::StepRequest req;
    req.set_job_id(job);
    req.set_step(step);
    req.set_lr(0.01f);
    return req;
  }
  Answer Step(const v1::StepRequest& req, const std::string& token = kToken,
              absl::Duration timeout = absl::Seconds(30)) {
    v1::StepResponse resp;
    return Of(stub_->Step(Context(token, timeout).get(), req, &resp));
  }
  static v1::GatherRequest GatherReq(const std::string& job, uint64_t min_version = 0) {
    v1::GatherRequest req;
    req.set_job_id(job);
    req.set_min_version(min_version);
    req.set_dtype(v1::DTYPE_FP32);
    return req;
  }
  Answer Gather(const v1::GatherRequest& req, const std::string& token = kToken,
                absl::Duration timeout = absl::Seconds(30)) {
    auto ctx = Context(token, timeout);
    auto reader = stub_->Gather(ctx.get(), req);
    v1::Chunk c;
    while (reader->Read(&c)) {
    }
    return Of(reader->Finish());
  }
  Answer Status(const std::string& job, const std::string& token) {
    v1::JobStatusRequest req;
    req.set_job_id(job);
    v1::JobStatusResponse resp;
    return Of(stub_->JobStatus(Context(token).get(), req, &resp));
  }
  Answer Delete(const std::string& job, const std::string& token) {
    v1::DeleteJobRequest req;
    req.set_job_id(job);
    v1::DeleteJobResponse resp;
    return Of(stub_->DeleteJob(Context(token).get(), req, &resp));
  }
  Answer Checkpoint(const std::string& job, uint64_t version, const std::string& root,
                    const std::string& token = kToken, absl::Duration timeout = absl::Seconds(30),
                    std::string* path = nullptr) {
    v1::CheckpointRequest req;
    req.set_job_id(job);
    req.set_version(version);
    req.set_root(root);
    v1::CheckpointResponse resp;
    Answer a = Of(stub_->Checkpoint(Context(token, timeout).get(), req, &resp));
    if (path != nullptr) *path = resp.path();
    return a;
  }
  v1::RestoreRequest RestoreReq(const std::string& path) {
    v1::RestoreRequest req;
    req.set_path(path);
    req.add_servers(server_->address());
    return req;
  }
  Answer Restore(const v1::RestoreRequest& req, const std::string& token = kToken) {
    v1::RestoreResponse resp;
    return Of(stub_->Restore(Context(token).get(), req, &resp));
  }
  Answer Rendezvous(const std::string& key, uint32_t world, const std::string& token,
                    absl::Duration timeout = absl::Seconds(30)) {
    v1::RendezvousRequest req;
    req.set_job_id("meet");
    req.set_key(key);
    req.set_rank(0);
    req.set_world(world);
    req.set_value("v");
    v1::RendezvousResponse resp;
    return Of(stub_->Rendezvous(Context(token, timeout).get(), req, &resp));
  }

  // A frame on a new data plane connection, and the code of the frame
  // that answers it (PUSH_ACK or GATHER_END).
  Answer Frame(FrameType type, const v1::DataFrameMeta& meta, const std::string& payload = "") {
    client::DataConnPool pool(server_->data_address(), 0);
    auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
    if (!conn.ok()) return {absl::StatusCode::kUnknown, conn.status().ToString()};
    (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(30));
    if (auto s = SendFrame((*conn)->stream(), type, meta, payload.data(), payload.size());
        !s.ok()) {
      return {absl::StatusCode::kUnknown, s.ToString()};
    }
    while (true) {
      auto got = RecvFrameStart((*conn)->stream());
      if (!got.ok()) return {absl::StatusCode::kUnknown, got.status().ToString()};
      if (!got->has_value()) return {absl::StatusCode::kUnknown, "connection closed"};
      const FrameType t = (*got)->header.type;
      if (t == FrameType::kPushAck || t == FrameType::kGatherEnd || t == FrameType::kError) {
        return {static_cast<absl::StatusCode>((*got)->meta.code()), (*got)->meta.message()};
      }
      std::string skip((*got)->header.payload_len, '\0');
      if (!RecvExact((*conn)->stream(), skip.data(), skip.size()).ok()) {
        return {absl::StatusCode::kUnknown, "payload cut"};
      }
    }
  }
  Answer PushFrame(const v1::Chunk& c, const std::string& token = kToken) {
    v1::DataFrameMeta meta;
    meta.set_token(token);
    *meta.mutable_chunk() = c;
    meta.mutable_chunk()->clear_data();
    return Frame(FrameType::kPush, meta, c.data());
  }
  Answer GatherFrame(const v1::GatherRequest& req, const std::string& token = kToken,
                     absl::Duration timeout = absl::Seconds(30)) {
    v1::DataFrameMeta meta;
    meta.set_token(token);
    *meta.mutable_gather() = req;
    meta.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    return Frame(FrameType::kGather, meta);
  }

  // Both nodes' gradients of `step` for every block of `job`, then the step.
  void CompleteStep(const std::string& job, uint64_t step) {
    std::vector<v1::Chunk> chunks;
    for (uint32_t node = 0; node < 2; ++node) {
      for (uint64_t b = 0; b < kBlocks; ++b) chunks.push_back(GradChunk(job, step, node, b));
    }
    Answer pushed = Push(chunks);
    ASSERT_EQ(pushed.code, absl::StatusCode::kOk) << pushed.message;
    Answer stepped = Step(StepReq(job, step));
    ASSERT_EQ(stepped.code, absl::StatusCode::kOk) << stepped.message;
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<v1::StateService::Stub> stub_;
  std::string dir_;
};

// The failures every call on a job has: a token of no job, or of another
// job, whether or not the named job exists (an unknown job is never
// NOT_FOUND).
std::vector<Row> TokenRows(
    const std::string& rpc,
    const std::function<Answer(const std::string& job, const std::string& token)>& call) {
  using absl::StatusCode;
  return {
      {rpc, "UNAUTHENTICATED: a token of no job", StatusCode::kUnauthenticated,
       [=] { return call("ok", kNobodysToken); }},
      {rpc, "UNAUTHENTICATED: no job of this token, unknown job", StatusCode::kUnauthenticated,
       [=] { return call("no-such-job", kNobodysToken); }},
      {rpc, "PERMISSION_DENIED: the token of another job", StatusCode::kPermissionDenied,
       [=] { return call("ok", kOtherToken); }},
      {rpc, "PERMISSION_DENIED: another job's token, unknown job", StatusCode::kPermissionDenied,
       [=] { return call("no-such-job", kOtherToken); }},
  };
}

void Append(std::vector<Row>& rows, std::vector<Row> more) {
  for (Row& r : more) rows.push_back(std::move(r));
}

TEST_F(StatusCodesTest, EveryDocumentedFailureHasItsDocumentedCode) {
  using absl::StatusCode;
  const std::string self = server_->address();
  // "ok": kToken's job, left at version 0 by every row below. "other":
  // kOtherToken's. "stepped": at version 2. "ckpt": checkpointed at 0.
  ASSERT_EQ(Register(JobRequest("ok", self)).code, StatusCode::kOk);
  ASSERT_EQ(Register(JobRequest("other", self), kOtherToken).code, StatusCode::kOk);
  ASSERT_EQ(Register(JobRequest("stepped", self)).code, StatusCode::kOk);
  CompleteStep("stepped", 0);
  CompleteStep("stepped", 1);
  ASSERT_EQ(Register(JobRequest("ckpt", self)).code, StatusCode::kOk);
  std::string ckpt;
  Answer written = Checkpoint("ckpt", 0, dir_, kToken, absl::Seconds(30), &ckpt);
  ASSERT_EQ(written.code, StatusCode::kOk) << written.message;
  // "ckpt" again, of another layout: a restore of the checkpoint over it
  // would change the model.
  ASSERT_EQ(Delete("ckpt", kToken).code, StatusCode::kOk);
  ASSERT_EQ(Register(JobRequest("ckpt", self, 3 * kBlock)).code, StatusCode::kOk);
  v1::RegisterJobRequest streamed = JobRequest("streamed", self);
  streamed.mutable_spec()->set_streamed_init(true);
  ASSERT_EQ(Register(streamed).code, StatusCode::kOk);
  // Node 1's first half of block 1 of "ok", kept (no step of "ok" ever
  // completes): the piece a partial overlap below overlaps.
  ASSERT_EQ(Push({GradChunk("ok", 0, 1, 1, kBlock / 2)}).code, StatusCode::kOk);
  const std::string garbled = dir_ + "/garbled/ckpt/v0";
  std::filesystem::create_directories(garbled);
  std::ofstream(garbled + "/shard-0-of-1.manifest.json") << "{ not json";

  const absl::Duration brief = absl::Seconds(1);
  std::vector<Row> rows;
  v1::RegisterJobRequest bad_spec = JobRequest("bad", self);
  bad_spec.mutable_spec()->set_block_elems(100);
  v1::RegisterJobRequest other_spec = JobRequest("ok", self, 3 * kBlock);
  v1::RegisterJobRequest huge = JobRequest("huge", self, 50000000);
  v1::RegisterJobRequest nvme = JobRequest("nvme", self);
  nvme.mutable_spec()->set_tier(v1::TIER_NVME);
  Append(rows,
         {
             {"RegisterJob", "INVALID_ARGUMENT: malformed spec", StatusCode::kInvalidArgument,
              [&] { return Register(bad_spec); }},
             {"RegisterJob", "UNAUTHENTICATED: no token, the id taken",
              StatusCode::kUnauthenticated, [&] { return Register(JobRequest("ok", self), ""); }},
             {"RegisterJob", "ALREADY_EXISTS: the id is taken by a job of another token",
              StatusCode::kAlreadyExists, [&] { return Register(JobRequest("other", self)); }},
             {"RegisterJob", "ALREADY_EXISTS: the job exists with a different spec",
              StatusCode::kAlreadyExists, [&] { return Register(other_spec); }},
             {"RegisterJob", "FAILED_PRECONDITION: a tier this server does not offer",
              StatusCode::kFailedPrecondition, [&] { return Register(nvme); }},
             {"RegisterJob", "RESOURCE_EXHAUSTED: the RAM budget", StatusCode::kResourceExhausted,
              [&] { return Register(huge); }},
         });

  Append(rows, TokenRows("InitWeights", [this](const std::string& job, const std::string& t) {
           v1::Chunk c = GradChunk(job, 0, 0, 0);
           return Init(c, t);
         }));
  v1::Chunk init_bf16 = GradChunk("streamed", 0, 0, 0);
  init_bf16.set_dtype(v1::DTYPE_BF16);
  Append(rows,
         {
             {"InitWeights", "INVALID_ARGUMENT: job_id missing", StatusCode::kInvalidArgument,
              [&] { return Init(GradChunk("", 0, 0, 0)); }},
             {"InitWeights", "INVALID_ARGUMENT: chunk out of range", StatusCode::kInvalidArgument,
              [&] { return Init(GradChunk("streamed", 0, 0, kBlocks)); }},
             {"InitWeights", "INVALID_ARGUMENT: dtype not FP32", StatusCode::kInvalidArgument,
              [&] { return Init(init_bf16); }},
             {"InitWeights", "FAILED_PRECONDITION: job not streamed_init",
              StatusCode::kFailedPrecondition, [&] { return Init(GradChunk("ok", 0, 0, 0)); }},
         });

  // PushGradients, and the data plane's PUSH frame: the same failures.
  v1::Chunk bf16 = GradChunk("ok", 0, 0, 0);
  bf16.set_dtype(v1::DTYPE_BF16);
  bf16.set_data(std::string(kBlock * 2, '\0'));
  v1::Chunk overlapping = GradChunk("ok", 0, 1, 1, kBlock / 2);
  overlapping.set_offset(kBlock / 4);
  v1::Chunk ragged = GradChunk("ok", 0, 0, 0);
  ragged.set_data(std::string(10, '\0'));  // not a whole number of fp32 elements
  const std::vector<
      std::pair<std::string, std::function<Answer(const v1::Chunk&, const std::string&)>>>
      push_planes = {
          {"PushGradients",
           [this](const v1::Chunk& c, const std::string& t) { return Push({c}, t); }},
          {"PUSH frame",
           [this](const v1::Chunk& c, const std::string& t) { return PushFrame(c, t); }},
      };
  for (const auto& [rpc, push] : push_planes) {
    auto p = push;
    Append(rows, TokenRows(rpc, [p](const std::string& job, const std::string& t) {
             return p(GradChunk(job, 0, 0, 0), t);
           }));
    Append(rows,
           {
               {rpc, "INVALID_ARGUMENT: job_id missing", StatusCode::kInvalidArgument,
                [=] { return p(GradChunk("", 0, 0, 0), kToken); }},
               {rpc, "INVALID_ARGUMENT: block not in this shard", StatusCode::kInvalidArgument,
                [=] { return p(GradChunk("ok", 0, 0, kBlocks), kToken); }},
               {rpc, "INVALID_ARGUMENT: length wrong", StatusCode::kInvalidArgument,
                [=] { return p(ragged, kToken); }},
               {rpc, "INVALID_ARGUMENT: node out of range", StatusCode::kInvalidArgument,
                [=] { return p(GradChunk("ok", 0, 2, 0), kToken); }},
               {rpc, "INVALID_ARGUMENT: dtype not the job's grad_dtype",
                StatusCode::kInvalidArgument, [=] { return p(bf16, kToken); }},
               {rpc, "FAILED_PRECONDITION: step too far ahead", StatusCode::kFailedPrecondition,
                [=] { return p(GradChunk("ok", 1, 0, 0), kToken); }},
           });
  }
  Append(rows, {
                   {"PushGradients", "INVALID_ARGUMENT: a piece overlapping another one partially",
                    StatusCode::kInvalidArgument, [&] { return Push({overlapping}); }},
                   {"PUSH frame", "INVALID_ARGUMENT: a piece overlapping another one partially",
                    StatusCode::kInvalidArgument, [&] { return PushFrame(overlapping); }},
               });

  Append(rows, TokenRows("GradStats", [this](const std::string& job, const std::string& t) {
           return Stats(job, 0, t);
         }));
  Append(rows, {
                   {"GradStats", "FAILED_PRECONDITION: step from the past",
                    StatusCode::kFailedPrecondition, [&] { return Stats("stepped", 0); }},
                   {"GradStats", "FAILED_PRECONDITION: step too far ahead",
                    StatusCode::kFailedPrecondition, [&] { return Stats("ok", 1); }},
                   {"GradStats", "DEADLINE_EXCEEDED: a node's gradient missing",
                    StatusCode::kDeadlineExceeded, [&] { return Stats("ok", 0, kToken, brief); }},
               });

  Append(rows, TokenRows("Step", [this](const std::string& job, const std::string& t) {
           return Step(StepReq(job, 0), t);
         }));
  v1::StepRequest negative_lr = StepReq("ok", 0);
  negative_lr.set_lr(-1);
  v1::StepRequest nan_scale = StepReq("ok", 0);
  nan_scale.set_grad_scale(std::nanf(""));
  v1::StepRequest big_state = StepReq("ok", 0);
  big_state.set_trainer_state(std::string(1025, 'x'));
  Append(rows,
         {
             {"Step", "INVALID_ARGUMENT: lr negative", StatusCode::kInvalidArgument,
              [&] { return Step(negative_lr); }},
             {"Step", "INVALID_ARGUMENT: grad_scale not finite", StatusCode::kInvalidArgument,
              [&] { return Step(nan_scale); }},
             {"Step", "INVALID_ARGUMENT: trainer_state over 1 KiB", StatusCode::kInvalidArgument,
              [&] { return Step(big_state); }},
             {"Step", "FAILED_PRECONDITION: step from the past", StatusCode::kFailedPrecondition,
              [&] { return Step(StepReq("stepped", 0)); }},
             {"Step", "FAILED_PRECONDITION: step too far ahead", StatusCode::kFailedPrecondition,
              [&] { return Step(StepReq("ok", 1)); }},
             {"Step", "DEADLINE_EXCEEDED: a node's gradient missing", StatusCode::kDeadlineExceeded,
              [&] { return Step(StepReq("ok", 0), kToken, brief); }},
         });

  // Gather, and the data plane's GATHER frame.
  v1::GatherRequest outside = GatherReq("ok");
  outside.set_begin(0);
  outside.set_end(kBlocks * kBlock + 1);
  v1::GatherRequest bf16_gather = GatherReq("ok");
  bf16_gather.set_dtype(v1::DTYPE_BF16);
  const std::vector<std::pair<
      std::string,
      std::function<Answer(const v1::GatherRequest&, const std::string&, absl::Duration)>>>
      gather_planes = {
          {"Gather", [this](const v1::GatherRequest& r, const std::string& t,
                            absl::Duration d) { return Gather(r, t, d); }},
          {"GATHER frame", [this](const v1::GatherRequest& r, const std::string& t,
                                  absl::Duration d) { return GatherFrame(r, t, d); }},
      };
  for (const auto& [rpc, gather] : gather_planes) {
    auto g = gather;
    Append(rows, TokenRows(rpc, [g](const std::string& job, const std::string& t) {
             return g(GatherReq(job), t, absl::Seconds(30));
           }));
    Append(rows,
           {
               {rpc, "INVALID_ARGUMENT: range outside the shard", StatusCode::kInvalidArgument,
                [=] { return g(outside, kToken, absl::Seconds(30)); }},
               {rpc, "INVALID_ARGUMENT: dtype neither FP32 nor the job's weight_dtype",
                StatusCode::kInvalidArgument,
                [=] { return g(bf16_gather, kToken, absl::Seconds(30)); }},
               {rpc, "DEADLINE_EXCEEDED: a block below min_version", StatusCode::kDeadlineExceeded,
                [=] { return g(GatherReq("ok", 1), kToken, brief); }},
           });
  }

  Append(rows, TokenRows("JobStatus", [this](const std::string& job, const std::string& t) {
           return Status(job, t);
         }));
  Append(rows, TokenRows("DeleteJob", [this](const std::string& job, const std::string& t) {
           return Delete(job, t);
         }));
  Append(rows, {
                   {"JobStatus", "INVALID_ARGUMENT: job_id missing", StatusCode::kInvalidArgument,
                    [&] { return Status("", kToken); }},
                   {"DeleteJob", "INVALID_ARGUMENT: job_id missing", StatusCode::kInvalidArgument,
                    [&] { return Delete("", kToken); }},
               });

  Append(rows, TokenRows("Checkpoint", [this](const std::string& job, const std::string& t) {
           return Checkpoint(job, 0, dir_, t);
         }));
  Append(
      rows,
      {
          {"Checkpoint", "INVALID_ARGUMENT: root not absolute", StatusCode::kInvalidArgument,
           [&] { return Checkpoint("ok", 0, "relative/dir"); }},
          {"Checkpoint", "FAILED_PRECONDITION: version already passed",
           StatusCode::kFailedPrecondition, [&] { return Checkpoint("stepped", 0, dir_); }},
          {"Checkpoint", "DEADLINE_EXCEEDED: the shard did not reach the version",
           StatusCode::kDeadlineExceeded, [&] { return Checkpoint("ok", 1, dir_, kToken, brief); }},
      });

  v1::RestoreRequest no_servers = RestoreReq(ckpt);
  no_servers.clear_servers();
  Append(
      rows,
      {
          {"Restore", "NOT_FOUND: a manifest or data file missing", StatusCode::kNotFound,
           [&] { return Restore(RestoreReq(dir_ + "/nothing/here/v0")); }},
          {"Restore", "INVALID_ARGUMENT: servers", StatusCode::kInvalidArgument,
           [&] { return Restore(no_servers); }},
          {"Restore", "UNAUTHENTICATED: the job exists, a token of no job",
           StatusCode::kUnauthenticated, [&] { return Restore(RestoreReq(ckpt), kNobodysToken); }},
          {"Restore", "PERMISSION_DENIED: the job exists with another token",
           StatusCode::kPermissionDenied, [&] { return Restore(RestoreReq(ckpt), kOtherToken); }},
          {"Restore", "DATA_LOSS: a malformed manifest", StatusCode::kDataLoss,
           [&] { return Restore(RestoreReq(garbled)); }},
          {"Restore", "FAILED_PRECONDITION: a layout other than the registered job's",
           StatusCode::kFailedPrecondition, [&] { return Restore(RestoreReq(ckpt)); }},
      });

  Append(rows,
         {
             {"Rendezvous", "UNAUTHENTICATED: no token", StatusCode::kUnauthenticated,
              [&] { return Rendezvous("k", 1, ""); }},
             {"Rendezvous", "INVALID_ARGUMENT: a key over 1 KiB", StatusCode::kInvalidArgument,
              [&] { return Rendezvous(std::string(1025, 'k'), 1, kToken); }},
             {"Rendezvous", "DEADLINE_EXCEEDED: a rank missing", StatusCode::kDeadlineExceeded,
              [&] { return Rendezvous("two", 2, kToken, brief); }},
         });

  for (const Row& row : rows) {
    SCOPED_TRACE(row.rpc + ", " + row.failure);
    const Answer got = row.call();
    EXPECT_EQ(got.code, row.code) << row.rpc << " (" << row.failure << ") answered "
                                  << absl::StatusCodeToString(got.code) << ": " << got.message;
  }
  // None of them changed "ok" (still at version 0, every job still there).
  v1::JobStatusRequest req;
  req.set_job_id("ok");
  v1::JobStatusResponse resp;
  ASSERT_TRUE(stub_->JobStatus(Context().get(), req, &resp).ok());
  EXPECT_EQ(resp.max_version(), 0u);
  EXPECT_EQ(Status("other", kOtherToken).code, StatusCode::kOk);
}

}  // namespace
}  // namespace zerostate
