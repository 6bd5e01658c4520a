// What a data plane connection that sends slowly, or sends nothing, may
// take from a real server: a PUSH frame with no valid
// token that announces 64 MiB and then trickles its payload holds none of
// the shared frame buffers, so a legitimate job on the same server pushes,
// steps and gathers meanwhile, bit-identically, over the data plane; the
// trickling connection is closed at --data_frame_timeout_seconds however
// often a byte comes; a connection that sends nothing is closed as well.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "client/data_conn.h"
#include "common/frame_io.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

// A server whose frame buffers hold one 64 KiB frame, and whose frames
// must arrive within a second.
std::unique_ptr<ServerProcess> StartServer() {
  ServerProcessOptions o = TestServerOptions();
  o.args.push_back("--metrics_listen=127.0.0.1:0");
  o.args.push_back("--data_buffer_bytes=65536");
  o.args.push_back("--data_frame_timeout_seconds=1");
  auto server = ServerProcess::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::unique_ptr<client::DataConn> Connect(const ServerProcess& server) {
  client::DataConnPool pool(server.data_address(), 0);
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(conn.ok()) << conn.status();
  return conn.ok() ? *std::move(conn) : nullptr;
}

// Sends one byte every 100 ms until the server has closed `conn`; false
// if it still accepts bytes after `limit` (the test's backstop, far over
// the frame timeout).
bool TrickleUntilClosed(client::DataConn& conn, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    char byte = 0;
    if (send(conn.fd(), &byte, 1, MSG_NOSIGNAL) != 1) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

TEST(DataPlaneTrickleTest, UnauthorizedTricklingPushHoldsNoBufferAndIsClosed) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::DataConn> attacker = Connect(*server);
  ASSERT_NE(attacker, nullptr);
  v1::DataFrameMeta meta;
  meta.set_token("no-such-token-0123456789abcdef0123456789abcdef");
  meta.mutable_chunk()->set_job_id("victim");
  meta.mutable_chunk()->set_dtype(v1::DTYPE_FP32);
  const std::string start = EncodeFrameStart(FrameType::kPush, meta, kMaxFramePayloadBytes);
  ASSERT_EQ(send(attacker->fd(), start.data(), start.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(start.size()));
  std::thread trickle([&] {
    EXPECT_TRUE(TrickleUntilClosed(*attacker, absl::Seconds(30)))
        << "the server kept a trickling frame past its frame timeout";
  });

  // Meanwhile a job with a valid token is served over the data plane
  // (its frames need the buffers: it pushes in BF16), without a retry.
  client::ClientOptions o = TestClientOptions({server->address()});
  o.data_shm = false;  // the TCP plane under test (this host would use shared memory)
  o.max_attempts = 1;
  auto c = client::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto job = (*c)->RegisterJob(TestSpec("victim", 1, v1::DTYPE_BF16, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const Layout& layout = ref.layout();
  std::vector<float> got(layout.total_elems);
  for (uint64_t step = 0; step < 2; ++step) {
    std::vector<float> g = NodeGradient(layout, 0, step);
    absl::Status pushed = (*job)->Push(step, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32);
    ASSERT_TRUE(pushed.ok()) << pushed;
    ASSERT_TRUE((*job)->Step(step, 0.01f, 1.0f, false).ok());
    ref.Step(step, {g}, 0.01f, 1.0f);
  }
  ASSERT_TRUE((*job)->Gather(2, {0, got.size()}, got.data(), v1::DTYPE_FP32).ok());
  ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(), "weights");
  trickle.join();
  auto page = ScrapeMetrics(server->metrics_address());
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_GT(MetricValue(*page, "zerostate_rpc_duration_seconds_count{method=\"DataPush\"}"), 0)
      << "the job's pushes did not use the data plane";
}

TEST(DataPlaneTrickleTest, ConnectionThatSendsNothingIsClosed) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::DataConn> idle = Connect(*server);
  ASSERT_NE(idle, nullptr);
  idle->stream().SetRecvDeadline(absl::Now() + absl::Seconds(30));
  char byte;
  absl::StatusOr<size_t> r = idle->stream().RecvSome(&byte, 1);
  EXPECT_TRUE(r.ok() && *r == 0) << (r.ok() ? "a byte came" : r.status().ToString());
}

}  // namespace
}  // namespace zerostate::testing
