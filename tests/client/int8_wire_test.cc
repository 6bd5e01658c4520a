// The compressed wire (JobSpec.gradient_wire / weight_wire WIRE_INT8)
// through the client against two real zerostate-server processes, over
// the TCP data plane and over gRPC (and bypassed on the same-host plane,
// which moves the plain dtypes): gradients whose groups quantize
// exactly train bit for bit as the plain fp32 wire does (so every piece
// lands where it belongs and is folded once), gathered int8 weights stay
// within half a quantum of the master, and about 1.02 bytes per parameter
// cross the wire each way. And a server that predates the int8 wire (one
// whose RegisterJob answer lists no wire formats) gets the job refused at
// registration, by name, and deleted again.
#include <cmath>
#include <memory>
#include <random>

#include "common/convert.h"
#include "grpcpp/grpcpp.h"
#include "tests/client/cluster_fixture.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::testing {
namespace {

enum Plane { kDataPlane, kGrpc, kSameHost };

// Parameter: the plane pushes and gathers go over. The same-host one
// (shared memory) bypasses the int8 wire: it moves the plain dtypes.
class Int8WireTest : public ::testing::TestWithParam<Plane> {
 protected:
  void SetUp() override {
    ServerProcessOptions so = TestServerOptions();
    so.args.push_back("--metrics_listen=127.0.0.1:0");
    auto cluster = ServerCluster::Start(2, so);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    client::ClientOptions o = TestClientOptions(cluster_->addresses());
    o.data_plane = GetParam() != kGrpc;
    o.data_shm = GetParam() == kSameHost;
    auto c = client::Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  std::unique_ptr<client::JobClient> Register(const std::string& id, bool int8) {
    v1::JobSpec spec = TestSpec(id, 2, int8 ? v1::DTYPE_BF16 : v1::DTYPE_FP32, v1::DTYPE_BF16);
    if (int8) {
      spec.set_gradient_wire(v1::WIRE_INT8);
      spec.set_weight_wire(v1::WIRE_INT8);
    }
    auto job = client_->RegisterJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::unique_ptr<client::Client> client_;
};

// Elements of -a, 0 or a with a = 127/128: every group's scale is 2^-7
// exactly (or 0), so int8 carries them without error and the residual
// stays zero.
std::vector<float> ExactGradient(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> g(n);
  for (float& x : g) x = (static_cast<int>(rng() % 3) - 1) * (127.0f / 128);
  return g;
}

TEST_P(Int8WireTest, ExactGroupsTrainBitForBitAsThePlainWire) {
  auto int8 = Register("int8", true);
  auto plain = Register("plain", false);
  ASSERT_TRUE(int8 && plain);
  const uint64_t n = int8->layout().total_elems;
  for (uint64_t step = 0; step < 3; ++step) {
    for (uint32_t node = 0; node < 2; ++node) {
      const std::vector<float> g = ExactGradient(n, static_cast<uint32_t>(step * 2 + node));
      // Two calls that cut the range anywhere, as buckets do.
      for (Range r : {Range{0, 1001}, Range{1001, n}}) {
        for (auto* job : {int8.get(), plain.get()}) {
          ASSERT_TRUE(job->Push(step, node, r, g.data() + r.begin, v1::DTYPE_FP32).ok());
        }
      }
    }
    for (auto* job : {int8.get(), plain.get()}) {
      ASSERT_TRUE(job->Step(step, 1e-2f, 0.5f, false, "").ok());
    }
  }
  std::vector<float> a(n), b(n);
  ASSERT_TRUE(int8->GatherMaster(3, Range{0, n}, a.data()).ok());
  ASSERT_TRUE(plain->GatherMaster(3, Range{0, n}, b.data()).ok());
  ExpectBitIdentical(a.data(), b.data(), n, "master after 3 steps");

  // The trainers' weights, rebuilt from int8: within half a quantum of the
  // bf16 copy (a group's scale, a power of two, is below twice its block's
  // largest magnitude / 127), plus the bf16 roundings of the copy and of
  // the result.
  std::vector<uint16_t> w(n);
  const client::WireStats before = int8->wire_stats();  // the fp32 master's gather counted
  ASSERT_TRUE(int8->Gather(3, Range{0, n}, w.data(), v1::DTYPE_BF16).ok());
  const uint32_t block = int8->layout().block_elems;
  for (uint64_t at = 0; at < n; at += block) {
    float amax = 0;
    for (uint64_t i = at; i < at + block; ++i) amax = std::max(amax, std::fabs(a[i]));
    for (uint64_t i = at; i < at + block; ++i) {
      const float got = Bf16ToFloat(w[i]);
      ASSERT_LE(std::fabs(got - a[i]), amax / 127 * 1.01f + std::fabs(a[i]) / 128)
          << "element " << i << ": " << got << " vs master " << a[i];
    }
  }
  const client::WireStats s = int8->wire_stats();
  EXPECT_EQ(s.push_elems, 3 * 2 * n);
  const double push = static_cast<double>(s.push_bytes) / s.push_elems;
  const double gather = static_cast<double>(s.gather_bytes - before.gather_bytes) /
                        static_cast<double>(s.gather_elems - before.gather_elems);
  const bool shm = GetParam() == kSameHost;
  if (shm) {
    EXPECT_EQ(push, 2.0) << "the same-host plane pushes bf16";
    EXPECT_EQ(gather, 2.0) << "the same-host plane gathers bf16";
  } else {
    EXPECT_GT(push, 1.0);
    EXPECT_LT(push, 1.04) << "int8 payload bytes per parameter pushed";
    EXPECT_GT(gather, 1.0);
    EXPECT_LT(gather, 1.04) << "int8 payload bytes per parameter gathered";
  }
  const client::WireStats p = plain->wire_stats();
  EXPECT_EQ(p.push_bytes, 4 * p.push_elems);  // fp32

  // The servers count the same, by direction and wire.
  double bytes = 0, elems = 0, plain_bytes = 0, plain_elems = 0;
  for (int i = 0; i < cluster_->size(); ++i) {
    auto page = ScrapeMetrics(cluster_->server(i).metrics_address());
    ASSERT_TRUE(page.ok()) << page.status();
    auto series = [&](const char* name, const char* job, const char* wire) {
      return MetricValue(*page, absl::StrCat(name, "{direction=\"push\",job_id=\"", job,
                                             "\",wire=\"", wire, "\"}"));
    };
    bytes += series("zerostate_wire_bytes_total", "int8", shm ? "plain" : "int8");
    elems += series("zerostate_wire_elements_total", "int8", shm ? "plain" : "int8");
    plain_bytes += series("zerostate_wire_bytes_total", "plain", "plain");
    plain_elems += series("zerostate_wire_elements_total", "plain", "plain");
  }
  EXPECT_EQ(bytes, static_cast<double>(s.push_bytes));
  EXPECT_EQ(elems, static_cast<double>(s.push_elems));
  EXPECT_EQ(plain_bytes, 4 * plain_elems);
}

INSTANTIATE_TEST_SUITE_P(Planes, Int8WireTest, ::testing::Values(kDataPlane, kGrpc, kSameHost),
                         [](const auto& info) {
                           return info.param == kDataPlane ? "DataPlane"
                                  : info.param == kGrpc    ? "Grpc"
                                                           : "SameHostBypassed";
                         });

// A StateService as one that predates the int8 wire answers: RegisterJob
// creates the job (unknown JobSpec fields are dropped) and lists no wire
// formats; DeleteJob is recorded.
class OldServer final : public v1::StateService::Service {
 public:
  grpc::Status RegisterJob(grpc::ServerContext*, const v1::RegisterJobRequest* req,
                           v1::RegisterJobResponse* resp) override {
    resp->mutable_info()->set_job_id(req->spec().job_id());
    resp->set_created(true);
    return grpc::Status::OK;
  }
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override {
    deleted_ = req->job_id();
    resp->set_deleted(true);
    return grpc::Status::OK;
  }
  std::string deleted_;
};

TEST(Int8WireOldServerTest, RegistrationIsRefusedByNameAndTheJobDeleted) {
  OldServer old;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&old);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  client::ClientOptions o = TestClientOptions({absl::StrCat("127.0.0.1:", port)});
  o.data_plane = false;
  auto c = client::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (bool gradients : {true, false}) {
    old.deleted_.clear();
    v1::JobSpec spec = TestSpec("old", 1, v1::DTYPE_BF16, v1::DTYPE_BF16);
    (gradients ? spec.set_gradient_wire(v1::WIRE_INT8) : spec.set_weight_wire(v1::WIRE_INT8));
    auto job = (*c)->RegisterJob(spec);
    ASSERT_TRUE(absl::IsFailedPrecondition(job.status())) << job.status();
    EXPECT_NE(job.status().message().find("predates the int8 wire"), std::string::npos)
        << job.status();
    EXPECT_NE(job.status().message().find(gradients ? "gradient_wire" : "weight_wire"),
              std::string::npos)
        << job.status();
    EXPECT_NE(job.status().message().find(o.servers[0]), std::string::npos) << job.status();
    EXPECT_EQ(old.deleted_, "old") << "the job the old server made is deleted again";
  }
  // A plain job is that server's as ever (its answer here is not a real
  // one: only that the wire check lets it through).
  old.deleted_.clear();
  auto plain = (*c)->RegisterJob(TestSpec("old", 1, v1::DTYPE_BF16, v1::DTYPE_BF16));
  EXPECT_FALSE(absl::IsFailedPrecondition(plain.status()) &&
               plain.status().message().find("int8") != std::string::npos)
      << plain.status();
  EXPECT_EQ(old.deleted_, "");
  server->Shutdown();
}

}  // namespace
}  // namespace zerostate::testing
