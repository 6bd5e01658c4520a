// Shared setup of the replicated-shard tests: three real
// zerostate-server processes, a job of two nodes with one backup per shard,
// the nodes' steps driven through the client library, and each copy of a
// shard read back through ReplicaService.ReadShard.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/data_conn.h"
#include "common/frame_io.h"
#include "grpcpp/create_channel.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"
#include "zerostate/v1/replica.grpc.pb.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::testing {

inline constexpr uint32_t kReplicaNodes = 2;

// A job of kReplicaNodes nodes over `servers` with `replicas` backups per
// shard: AdamW, bf16 weights, 512-element blocks.
inline v1::JobSpec ReplicatedSpec(const std::string& id, uint32_t replicas) {
  v1::JobSpec spec = TestSpec(id, kReplicaNodes, v1::DTYPE_FP32, v1::DTYPE_BF16);
  spec.set_replicas(replicas);
  return spec;
}

// Node `node`'s gradient of `step`, pushed whole.
inline absl::Status PushNodeGradient(client::JobClient& job, uint32_t node, uint64_t step) {
  std::vector<float> g = NodeGradient(job.layout(), node, step);
  return job.Push(step, node, {0, job.layout().used_elems}, g.data(), v1::DTYPE_FP32);
}

inline float StepLr(uint64_t step) { return 0.01f * static_cast<float>(step + 1); }
inline constexpr float kStepScale = 1.0f / kReplicaNodes;

// One step of the job: both nodes push (at once), node 0 asks the
// statistics and steps. The first error wins.
inline absl::Status RunStep(std::vector<std::unique_ptr<client::JobClient>>& nodes, uint64_t step) {
  std::vector<absl::Status> pushed(nodes.size());
  std::vector<std::thread> threads;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    threads.emplace_back([&, n] { pushed[n] = PushNodeGradient(*nodes[n], n, step); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : pushed) {
    if (!s.ok()) return s;
  }
  auto stats = nodes[0]->GradStats(step);
  if (!stats.ok()) return stats.status();
  return nodes[0]->Step(step, StepLr(step), kStepScale, false);
}

// One step as the nodes of a trainer run it: every node pushes its
// gradient, then gathers the new version; node 0 meanwhile asks the
// statistics and steps. `after_push` runs on node 0 once its push is in.
// A job with speculative_step: node 0 sends the step ahead (StepAhead)
// before it pushes.
inline absl::Status TrainerStep(std::vector<std::unique_ptr<client::JobClient>>& nodes,
                                uint64_t step, std::vector<std::vector<float>>& grads,
                                const std::function<void()>& after_push) {
  std::vector<absl::Status> result(nodes.size());
  std::vector<std::thread> threads;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    threads.emplace_back([&, n] {
      client::JobClient& job = *nodes[n];
      const uint64_t used = job.layout().used_elems;
      // The buffer stays as pushed until the new version is gathered.
      grads[n] = NodeGradient(job.layout(), n, step);
      absl::Status s = absl::OkStatus();
      if (n == 0 && job.spec().speculative_step()) {
        s = job.StepAhead(step, StepLr(step), kStepScale);
      }
      if (s.ok()) s = job.Push(step, n, {0, used}, grads[n].data(), v1::DTYPE_FP32);
      if (s.ok() && n == 0) {
        if (after_push) after_push();
        auto stats = job.GradStats(step);
        s = stats.ok() ? job.Step(step, StepLr(step), kStepScale, false) : stats.status();
      }
      std::vector<float> weights(job.layout().total_elems);
      if (s.ok()) {
        s = job.Gather(step + 1, {0, job.layout().total_elems}, weights.data(), v1::DTYPE_FP32);
      }
      result[n] = s;
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (!result[n].ok())
      return absl::Status(result[n].code(), absl::StrCat("node ", n, ": ", result[n].message()));
  }
  return absl::OkStatus();
}

// Runs steps [from, to) of the nodes as TrainerStep, each also taken by
// `ref`; `after_push` (if set) on node 0 once its push of step `from` is in.
inline void TrainSteps(std::vector<std::unique_ptr<client::JobClient>>& nodes,
                       ReferenceModel& ref, uint64_t from, uint64_t to,
                       const std::function<void()>& after_push = nullptr) {
  std::vector<std::vector<float>> grads(nodes.size());
  for (uint64_t step = from; step < to; ++step) {
    absl::Status s = TrainerStep(nodes, step, grads, step == from ? after_push : nullptr);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
    ref.Step(step, grads, StepLr(step), kStepScale);
  }
}

// The nodes of a run: node 0 registers the job, the others attach; each
// client fails over after 500 ms.
struct ReplicatedRun {
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::JobClient>> nodes;
};

// TestServerOptions with a metrics endpoint.
inline ServerProcessOptions MeteredServerOptions() {
  ServerProcessOptions o = TestServerOptions();
  o.args.push_back("--metrics_listen=127.0.0.1:0");
  return o;
}

// Series `name` of server `s`'s metrics page.
inline double ServerMetric(ServerProcess& s, const std::string& name) {
  auto page = ScrapeMetrics(s.metrics_address());
  if (!page.ok()) {
    ADD_FAILURE() << page.status();
    return -1;
  }
  return MetricValue(*page, name);
}

// Payload bytes of REPLICA_SUM frames server `s` kept (a backup's sums
// that came ahead of their steps on its data plane).
inline double ReplicaSumBytes(ServerProcess& s) {
  return ServerMetric(s, "zerostate_rpc_bytes_received_total{method=\"DataReplicaSum\"}");
}

// Pushed gradient bytes server `s` took on its data plane (TCP or the
// same-host plane), not over gRPC.
inline double DataPlanePushBytes(ServerProcess& s) {
  double bytes = 0;
  for (const char* method : {"DataPush", "ShmPush"}) {
    bytes += std::max(0.0, ServerMetric(s, absl::StrCat("zerostate_rpc_bytes_received_total{method=\"",
                                                        method, "\"}")));
  }
  return bytes;
}

// `hook`: each client's ClientOptions::before_failover_probe; `tune`
// (if set) changes each client's options last.
inline absl::StatusOr<ReplicatedRun> StartNodes(
    const v1::JobSpec& spec, const std::vector<std::string>& servers,
    std::function<void(int shard, int server)> hook = nullptr,
    const std::function<void(client::ClientOptions&)>& tune = nullptr) {
  ReplicatedRun run;
  for (uint32_t n = 0; n < kReplicaNodes; ++n) {
    client::ClientOptions o = TestClientOptions(servers);
    o.failover_wait = std::chrono::milliseconds(500);
    o.before_failover_probe = hook;
    if (tune) tune(o);
    auto c = client::Client::Connect(o);
    if (!c.ok()) return c.status();
    auto j = n == 0 ? (*c)->RegisterJob(spec) : (*c)->AttachJob(spec.job_id());
    if (!j.ok()) return j.status();
    run.clients.push_back(*std::move(c));
    run.nodes.push_back(*std::move(j));
  }
  return run;
}

// Expects the run at version `steps` (every step applied once, none rolled
// back) with the reference's masters, bit for bit, on every node.
inline void ExpectReferenceRun(std::vector<std::unique_ptr<client::JobClient>>& nodes,
                               const ReferenceModel& ref, uint64_t steps) {
  auto version = nodes.back()->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, steps);
  const uint64_t total = ref.layout().total_elems;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    std::vector<float> master(total);
    ASSERT_TRUE(nodes[n]->GatherMaster(steps, {0, total}, master.data()).ok());
    ExpectBitIdentical(master.data(), ref.master(), total, absl::StrCat("node ", n, "'s master"));
  }
}

// JobStatus of `shard` asked of `server` directly (a backup asked so
// claims the shard: the failover's way to it).
inline grpc::Status DirectJobStatus(const std::string& server, const std::string& job,
                                    uint32_t shard) {
  auto stub =
      v1::StateService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("zerostate-job-token", kTestJobToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::JobStatusRequest req;
  req.set_job_id(job);
  req.set_shard(shard);
  v1::JobStatusResponse resp;
  return stub->JobStatus(&ctx, req, &resp);
}

// Step `step` of shard `shard` asked of `server` directly.
inline grpc::Status DirectStep(const std::string& server, const std::string& job, uint32_t shard,
                               uint64_t step, float lr) {
  auto stub =
      v1::StateService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("zerostate-job-token", kTestJobToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::StepRequest req;
  req.set_job_id(job);
  req.set_shard(shard);
  req.set_step(step);
  req.set_lr(lr);
  req.set_grad_scale(kStepScale);
  v1::StepResponse resp;
  return stub->Step(&ctx, req, &resp);
}

// A connection to the data plane of `server` (its port from the JobStatus
// of `job`'s shard there), as a primary's lanes to a backup.
inline std::unique_ptr<client::DataConn> DataConnTo(const std::string& server,
                                                    const std::string& job) {
  auto stub =
      v1::StateService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("zerostate-job-token", kTestJobToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::JobStatusRequest req;
  req.set_job_id(job);
  v1::JobStatusResponse resp;
  grpc::Status s = stub->JobStatus(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(resp.data_port(), 0u);
  client::DataConnPool pool(client::DataAddress(server, resp.data_port()), 0);
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(20));
  EXPECT_TRUE(conn.ok()) << conn.status();
  return conn.ok() ? *std::move(conn) : nullptr;
}

// A block's summed gradient of the right size for `layout` (zeros): its
// elements inside the flat space.
inline std::string ZeroSum(const Layout& layout, uint64_t block) {
  const uint64_t begin = block * layout.block_elems;
  const uint64_t required = std::min<uint64_t>(
      layout.block_elems, layout.used_elems - std::min(begin, layout.used_elems));
  return std::string(required * sizeof(float), '\0');
}

// Sends one REPLICA_SUM frame on `conn` and returns its REPLICA_SUM_ACK's
// status (an ERROR frame's, or the connection's, when there is none).
inline absl::Status SendReplicaSum(client::DataConn& conn, const std::string& token,
                                   const v1::ReplicaSum& sum, const std::string& bytes) {
  v1::DataFrameMeta meta;
  meta.set_token(token);
  *meta.mutable_replica_sum() = sum;
  conn.stream().SetDeadline(absl::Now() + absl::Seconds(20));
  if (auto s = SendFrame(conn.stream(), FrameType::kReplicaSum, meta, bytes.data(), bytes.size());
      !s.ok()) {
    return s;
  }
  auto answer = RecvFrameStart(conn.stream());
  if (!answer.ok()) return answer.status();
  if (!answer->has_value()) return absl::UnavailableError("closed");
  EXPECT_EQ((*answer)->header.type, FrameType::kReplicaSumAck);
  return absl::Status(static_cast<absl::StatusCode>((*answer)->meta.code()),
                      (*answer)->meta.message());
}

// One copy of a shard as ReplicaService.ReadShard serves it.
struct ShardCopy {
  std::vector<uint64_t> versions;
  std::vector<uint64_t> applied_steps;
  std::string state;  // every block's state, end to end
  std::vector<v1::ShardBlock> blocks;  // as served
};

inline absl::StatusOr<ShardCopy> ReadCopy(const std::string& server, const std::string& job_id,
                                          uint32_t shard, uint64_t min_version) {
  auto stub =
      v1::ReplicaService::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("zerostate-job-token", kTestJobToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::ReadShardRequest req;
  req.set_job_id(job_id);
  req.set_shard(shard);
  req.set_min_version(min_version);
  auto reader = stub->ReadShard(&ctx, req);
  ShardCopy copy;
  v1::ShardBlock block;
  while (reader->Read(&block)) {
    copy.versions.push_back(block.version());
    copy.applied_steps.push_back(block.applied_steps());
    copy.state += block.state();
    copy.blocks.push_back(block);
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("ReadShard from ", server, ": ", s.error_message()));
  }
  return copy;
}

// ReadCopy, for a copy a catch-up in the background may not have created
// yet: while the server knows no such job (UNAUTHENTICATED, a restarted
// server before its Seed), asked again, for up to 20 s. A copy that
// exists waits for `min_version` in ReadShard itself.
inline absl::StatusOr<ShardCopy> AwaitCopy(const std::string& server, const std::string& job_id,
                                           uint32_t shard, uint64_t min_version) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (true) {
    auto copy = ReadCopy(server, job_id, shard, min_version);
    if (copy.ok() || !absl::IsUnauthenticated(copy.status()) || absl::Now() >= give_up) {
      return copy;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// Trains steps from `*step` on (each also taken by `ref`) until every
// server of `primaries` counts no under-replicated block, at most
// `max_steps` of them; `*step` is then the next step. A restarted copy's
// catch-up starts off the step's path and rejoins at the first step after
// its seed is acknowledged (server/replication/catch_up.h): one step on a
// fast build, more under the sanitizers.
inline void TrainUntilReplicated(std::vector<std::unique_ptr<client::JobClient>>& nodes,
                                 ReferenceModel& ref, uint64_t* step,
                                 const std::vector<ServerProcess*>& primaries,
                                 uint64_t max_steps = 6) {
  auto lost = [&] {
    double blocks = 0;
    for (ServerProcess* s : primaries) blocks += ServerMetric(*s, "zerostate_under_replicated_blocks");
    return blocks;
  };
  for (uint64_t n = 0; lost() > 0; ++n) {
    ASSERT_LT(n, max_steps) << "the copies did not rejoin in " << max_steps << " steps";
    TrainSteps(nodes, ref, *step, *step + 1);
    ++*step;
  }
}

// Expects the copies of `shard` on `a` and `b` at the same versions and
// bit-identical (masters and moments).
inline void ExpectSameCopies(const std::string& a, const std::string& b, const std::string& job,
                             uint32_t shard, uint64_t version) {
  auto ca = AwaitCopy(a, job, shard, version);
  auto cb = AwaitCopy(b, job, shard, version);
  ASSERT_TRUE(ca.ok()) << ca.status();
  ASSERT_TRUE(cb.ok()) << cb.status();
  EXPECT_EQ(ca->versions, cb->versions) << "shard " << shard;
  EXPECT_EQ(ca->applied_steps, cb->applied_steps) << "shard " << shard;
  ASSERT_EQ(ca->state.size(), cb->state.size()) << "shard " << shard;
  ExpectBitIdentical(reinterpret_cast<const float*>(cb->state.data()),
                     reinterpret_cast<const float*>(ca->state.data()), ca->state.size() / 4,
                     absl::StrCat("shard ", shard, " copy on ", b, " against ", a));
}

// A directory of this test's own (under the test temp dir), for files the
// servers and the test exchange.
inline std::string TestDirectory(const std::string& what) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), ".", info->name());
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  const std::string dir = absl::StrCat(::testing::TempDir(), "zs_", what, ".", getpid(), ".", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// Whether `path` appears within `timeout`.
inline bool AwaitFile(const std::string& path, absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time give_up = absl::Now() + timeout;
  while (access(path.c_str(), F_OK) != 0) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// Creates the empty file `path`.
inline void Touch(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f != nullptr) std::fclose(f);
}

// Waits up to `timeout` for series `name` of server `s` to read `value`;
// false (and the last value read in `*last`) when it did not.
inline bool AwaitMetric(ServerProcess& s, const std::string& name, double value,
                        double* last = nullptr, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time give_up = absl::Now() + timeout;
  double now = ServerMetric(s, name);
  while (now != value && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
    now = ServerMetric(s, name);
  }
  if (last != nullptr) *last = now;
  return now == value;
}

// For tests of single ReplicaService calls to server 1's backup copy of
// shard 0 (whose primary is server 0): three servers, a job of two nodes
// with one backup per shard, a few steps in.
class ReplicaCallTest : public ::testing::Test {
 protected:
  // Starts the servers (metrics on) and job `job_id`, runs steps [0,
  // steps) and reads shard 0's copy on its primary into primary_ (at least
  // two blocks).
  void StartSteppedJob(const std::string& job_id, uint64_t steps) {
    auto cluster = ServerCluster::Start(3, MeteredServerOptions());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    servers_ = cluster_->addresses();
    auto run = StartNodes(ReplicatedSpec(job_id, 1), servers_);
    ASSERT_TRUE(run.ok()) << run.status();
    run_ = *std::move(run);
    for (uint64_t step = 0; step < steps; ++step) {
      ASSERT_TRUE(RunStep(run_.nodes, step).ok()) << "step " << step;
    }
    auto primary = ReadCopy(servers_[0], job_id, 0, steps);
    ASSERT_TRUE(primary.ok()) << primary.status();
    primary_ = *std::move(primary);
    ASSERT_GE(primary_.blocks.size(), 2u);
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::vector<std::string> servers_;
  ReplicatedRun run_;
  ShardCopy primary_;  // shard 0 on server 0
};

}  // namespace zerostate::testing
