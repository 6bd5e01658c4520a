// A gather its client cancelled (Ticket::Cancel) frees the server at once,
// on every plane: an in-process StateServer on loopback, its own metrics
// registry read for zerostate_gathers_in_progress (the gather is waiting
// before the cancel, gone after it, far before its 60 s deadline) and the
// CANCELLED answer recorded. And bytes the client pipelined behind a
// waiting gather on a live TCP connection never count as a hang-up.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/client.h"
#include "client/data_conn.h"
#include "common/frame_io.h"
#include "prometheus/registry.h"
#include "server/state_server.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 256;
constexpr char kToken[] = "gather-cancel-test-token-0123456789abcdef";
// Far below the gathers' 60 s deadline (rpc_timeout), far above the 20 ms
// between a waiting gather's checks on a loaded 2-core machine.
constexpr absl::Duration kFreedWithin = absl::Seconds(10);

double Sample(prometheus::Registry& r, const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  double total = 0;
  for (const auto& family : r.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label) found = found || (l.name == k && l.value == v);
        match = match && found;
      }
      if (match) total += m.gauge.value + m.counter.value;
    }
  }
  return total;
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_job_id("cancel");
  auto* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(kBlock);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_FP32);
  spec.set_block_elems(kBlock);
  spec.set_seed(7);
  return spec;
}

class GatherCancelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.tls.plaintext = true;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.metrics_registry = registry_;
    options.threads = 1;
    auto server = StateServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<client::Client> Connect(bool data_plane, bool shm) {
    client::ClientOptions options;
    options.servers = {server_->address()};
    options.plaintext = true;
    options.job_token = kToken;
    options.data_plane = data_plane;
    options.data_shm = shm;
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  double InProgress() { return Sample(*registry_, "zerostate_gathers_in_progress"); }

  // Waits until `want` gathers are in progress, at most `within`.
  bool AwaitInProgress(double want, absl::Duration within) {
    const absl::Time until = absl::Now() + within;
    while (InProgress() != want) {
      if (absl::Now() > until) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }

  // A gather of version 5, which never comes, cancelled once the server
  // waits for it: the server's wait ends far before its deadline, answered
  // CANCELLED (recorded under `method`); the job is unchanged.
  void CancelWaitingGather(bool data_plane, bool shm, const std::string& method) {
    auto c = Connect(data_plane, shm);
    ASSERT_NE(c, nullptr);
    auto job = c->RegisterJob(Spec());
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<float> out(kBlock);
    client::Ticket ticket = (*job)->GatherAsync(5, Range{0, kBlock}, out.data(), v1::DTYPE_FP32);
    ASSERT_TRUE(AwaitInProgress(1, absl::Seconds(30))) << "the gather never began waiting";
    const absl::Time cancelled = absl::Now();
    ticket.Cancel("the step that brings version 5 failed");
    EXPECT_TRUE(absl::IsCancelled(ticket.Wait())) << ticket.Wait();
    EXPECT_TRUE(AwaitInProgress(0, kFreedWithin))
        << "the server still waits for version 5 " << kFreedWithin << " after the cancel";
    const absl::Duration freed = absl::Now() - cancelled;
    EXPECT_LT(freed, kFreedWithin);
    EXPECT_EQ(Sample(*registry_, "zerostate_rpc_rejected_total",
                     {{"method", method}, {"reason", "CANCELLED"}}),
              1)
        << method;
    // Nothing changed: version 0, served on a new stream.
    auto version = (*job)->Version();
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(*version, 0u);
    EXPECT_TRUE((*job)->Gather(0, Range{0, kBlock}, out.data(), v1::DTYPE_FP32).ok());
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<StateServer> server_;
};

TEST_F(GatherCancelTest, CancelledTcpGatherFreesTheSession) {
  CancelWaitingGather(/*data_plane=*/true, /*shm=*/false, "DataGather");
}

TEST_F(GatherCancelTest, CancelledSameHostGatherFreesTheSession) {
  ASSERT_TRUE(server_->data_shm());
  CancelWaitingGather(/*data_plane=*/true, /*shm=*/true, "ShmGather");
}

TEST_F(GatherCancelTest, CancelledGrpcGatherFreesItsHandler) {
  CancelWaitingGather(/*data_plane=*/false, /*shm=*/false, "Gather");
}

// A GATHER of a version that does not come, and a second GATHER sent right
// behind it on the same connection: the bytes waiting to be read are no
// hang-up. The first waits out its own timeout (DEADLINE_EXCEEDED), then
// the second is served, on the same connection.
TEST_F(GatherCancelTest, PipelinedFrameIsNoHangUp) {
  auto c = Connect(/*data_plane=*/false, /*shm=*/false);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->RegisterJob(Spec()).ok());
  client::DataConnPool pool(server_->data_address(), 0);
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  DataStream& stream = (*conn)->stream();
  auto gather = [&](uint64_t version, absl::Duration timeout) {
    v1::DataFrameMeta meta;
    meta.set_token(kToken);
    meta.mutable_gather()->set_job_id("cancel");
    meta.mutable_gather()->set_min_version(version);
    meta.mutable_gather()->set_dtype(v1::DTYPE_FP32);
    meta.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    return SendFrame(stream, FrameType::kGather, meta);
  };
  ASSERT_TRUE(gather(1, absl::Seconds(1)).ok());
  ASSERT_TRUE(gather(0, absl::Seconds(30)).ok());
  stream.SetDeadline(absl::Now() + absl::Seconds(30));
  auto first = RecvFrameStart(stream);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ((*first)->header.type, FrameType::kGatherEnd);
  EXPECT_EQ((*first)->meta.code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded))
      << (*first)->meta.message();
  EXPECT_NE((*first)->meta.message().find("did not reach version 1"), std::string::npos)
      << (*first)->meta.message();
  uint64_t bytes = 0;
  while (true) {
    auto frame = RecvFrameStart(stream);
    ASSERT_TRUE(frame.ok() && frame->has_value()) << frame.status();
    if ((*frame)->header.type == FrameType::kGatherEnd) {
      EXPECT_EQ((*frame)->meta.code(), 0) << (*frame)->meta.message();
      break;
    }
    ASSERT_EQ((*frame)->header.type, FrameType::kGatherPiece);
    std::vector<char> payload((*frame)->header.payload_len);
    ASSERT_TRUE(RecvExact(stream, payload.data(), payload.size()).ok());
    bytes += payload.size();
  }
  EXPECT_EQ(bytes, kBlock * sizeof(float));
  EXPECT_EQ(Sample(*registry_, "zerostate_rpc_rejected_total", {{"reason", "CANCELLED"}}), 0);
}

}  // namespace
}  // namespace zerostate::server
