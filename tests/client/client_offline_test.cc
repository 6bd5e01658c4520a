// Client behaviour that needs no server: arguments refused before anything
// is sent, and a clear error naming the server when nothing listens.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/client_impl.h"
#include "client/job_client_impl.h"
#include "prometheus/registry.h"

namespace zerostate::client {
namespace {

// An address on which nothing listens (a port just bound and released).
std::string ClosedAddress() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_job_id("offline");
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(4096);
  spec.set_num_nodes(2);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_block_elems(1024);
  return spec;
}

// Sum of a metric family's samples with the given label value.
double MetricValue(prometheus::Registry& r, const std::string& name, const std::string& label) {
  double total = 0;
  for (const auto& family : r.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.value != label) continue;
        total += m.counter.value + static_cast<double>(m.histogram.sample_count);
      }
    }
  }
  return total;
}

class ClientOfflineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClientOptions o;
    o.servers = {ClosedAddress(), ClosedAddress()};
    o.max_attempts = 3;
    o.initial_backoff = std::chrono::milliseconds(1);
    o.max_backoff = std::chrono::milliseconds(4);
    o.rpc_timeout = std::chrono::milliseconds(5000);
    o.metrics = registry_;
    o.plaintext = true;
    // With a token every server is asked at once (without one, the first
    // server alone is asked first, to generate it).
    o.job_token = "offline-test-token-0123456789abcdef012345";
    auto client = Client::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    // A handle to a job as if registered, without talking to any server.
    auto impl = std::make_shared<Client::Impl>(o, grpc::InsecureChannelCredentials());
    job_ = std::make_unique<JobClient>(std::make_unique<JobClient::Impl>(
        impl, *NormalizeJobSpec(Spec()), std::vector<uint64_t>{1, 2}));
  }

  double Calls(const char* method) {
    return MetricValue(*registry_, "zerostate_client_rpc_duration_seconds", method);
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<Client> client_;
  std::unique_ptr<JobClient> job_;
};

TEST_F(ClientOfflineTest, ConnectRefusesBadOptions) {
  auto client = Client::Connect(ClientOptions{});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("servers"), absl::string_view::npos);
}

TEST_F(ClientOfflineTest, BadSpecIsRefusedBeforeSending) {
  v1::JobSpec spec = Spec();
  spec.mutable_tensors(0)->set_shape(0, 0);
  auto job = client_->RegisterJob(spec);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("spec: tensors[0].shape[0]"), absl::string_view::npos)
      << job.status();
  EXPECT_EQ(Calls("RegisterJob"), 0);
}

TEST_F(ClientOfflineTest, BadJobIdIsRefusedBeforeSending) {
  auto job = client_->AttachJob("bad id!");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("job_id"), absl::string_view::npos);
  EXPECT_EQ(Calls("JobStatus"), 0);
}

TEST_F(ClientOfflineTest, BadRendezvousRankIsRefused) {
  auto values = client_->Rendezvous("ns", "k", 3, 3, "v");
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("rank: 3"), absl::string_view::npos);
  values = client_->Rendezvous("ns", "k", 0, 1, std::string(5000, 'x'));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("value:"), absl::string_view::npos);
  EXPECT_EQ(Calls("Rendezvous"), 0);
}

TEST_F(ClientOfflineTest, BadPushArgumentsAreRefusedBeforeSending) {
  std::vector<float> g(4096);
  const uint64_t n = job_->layout().total_elems;
  struct Case {
    uint32_t node;
    Range elems;
    const void* data;
    v1::DType dtype;
    const char* needle;
  } cases[] = {
      {2, {0, 16}, g.data(), v1::DTYPE_FP32, "node: 2"},
      {0, {0, n + 1}, g.data(), v1::DTYPE_FP32, "elems:"},
      {0, {0, 16}, nullptr, v1::DTYPE_FP32, "data: null"},
      {0, {0, 16}, g.data(), v1::DTYPE_BF16, "dtype: bf16"},
  };
  for (const Case& c : cases) {
    absl::Status s = job_->Push(0, c.node, c.elems, c.data, c.dtype);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.needle), absl::string_view::npos) << s;
  }
  EXPECT_EQ(Calls("PushGradients"), 0);
}

TEST_F(ClientOfflineTest, BadGatherArgumentsAreRefusedBeforeSending) {
  std::vector<float> w(16);
  absl::Status s = job_->Gather(0, {0, 16}, w.data(), v1::DTYPE_FP16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("weight_dtype bf16"), absl::string_view::npos) << s;
  s = job_->Gather(0, {0, 16}, nullptr, v1::DTYPE_FP32);
  EXPECT_NE(s.message().find("out: null"), absl::string_view::npos) << s;
  s = job_->GatherMaster(0, {20, 16}, w.data());
  EXPECT_NE(s.message().find("elems: begin 20 > end 16"), absl::string_view::npos) << s;
  s = job_->InitWeights({0, 16}, nullptr);
  EXPECT_NE(s.message().find("data: null"), absl::string_view::npos) << s;
  EXPECT_EQ(Calls("Gather") + Calls("InitWeights"), 0);
}

TEST_F(ClientOfflineTest, EmptyRangeIsANoOp) {
  EXPECT_TRUE(job_->Push(0, 0, {8, 8}, nullptr, v1::DTYPE_FP32).ok());
  EXPECT_TRUE(job_->Gather(0, {8, 8}, nullptr, v1::DTYPE_FP32).ok());
}

TEST_F(ClientOfflineTest, UnreachableServerIsNamedAfterRetries) {
  std::vector<float> g(16, 1.0f);
  absl::Status s = job_->Push(0, 0, {0, 16}, g.data(), v1::DTYPE_FP32);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("PushGradients to " + client_->options().servers[0]),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("after 3 attempts"), absl::string_view::npos) << s;
}

TEST_F(ClientOfflineTest, UnreachableServerFailsRegistrationByName) {
  auto job = client_->RegisterJob(Spec());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable) << job.status();
  EXPECT_NE(job.status().message().find("RegisterJob to " + client_->options().servers[0]),
            absl::string_view::npos)
      << job.status();
  EXPECT_EQ(MetricValue(*registry_, "zerostate_client_retries_total", "RegisterJob"), 4);
}

}  // namespace
}  // namespace zerostate::client
