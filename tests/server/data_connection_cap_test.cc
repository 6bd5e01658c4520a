// The cap on the TCP data plane's connections (--max_data_connections),
// against real server processes: connections over the cap get an ERROR
// frame (RESOURCE_EXHAUSTED) naming the flag and are closed, counted in
// zerostate_data_connections_refused_total; once one closes, a new one is
// served; the client library, every data plane connection refused, still
// pushes, steps and gathers bit-identically over gRPC. And the values the
// server refuses at start.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "client/data_conn.h"
#include "common/frame_io.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"
#include "tests/testing/frame_cases.h"

namespace zerostate::testing {
namespace {

constexpr char kOpen[] = "zerostate_data_connections";
constexpr char kRefused[] = "zerostate_data_connections_refused_total";

double Metric(const ServerProcess& server, const std::string& name) {
  auto page = ScrapeMetrics(server.metrics_address());
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? MetricValue(*page, name) : -1;
}

// Polls until `name` on `server` equals `want` (no time limit: the test's
// timeout is the backstop).
void AwaitMetric(const ServerProcess& server, const std::string& name, double want) {
  while (Metric(server, name) != want) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

std::unique_ptr<ServerProcess> StartServer(int max_connections) {
  ServerProcessOptions o = TestServerOptions();
  o.args.push_back("--metrics_listen=127.0.0.1:0");
  o.args.push_back(absl::StrCat("--max_data_connections=", max_connections));
  auto server = ServerProcess::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  EXPECT_FALSE((*server)->data_address().empty()) << "the server printed no data plane address";
  return *std::move(server);
}

// A raw connection to the data plane of `server`.
std::unique_ptr<client::DataConn> Connect(const ServerProcess& server) {
  client::DataConnPool pool(server.data_address(), 0);
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(conn.ok()) << conn.status();
  if (!conn.ok()) return nullptr;
  (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(30));
  return *std::move(conn);
}

// The next frame on `conn`; a default FrameStart (and a failure) when the
// connection ended instead.
FrameStart Reply(client::DataConn& conn) {
  absl::StatusOr<std::optional<FrameStart>> f = RecvFrameStart(conn.stream());
  EXPECT_TRUE(f.ok() && f->has_value()) << (f.ok() ? "closed" : f.status().ToString());
  return f.ok() && f->has_value() ? **f : FrameStart{};
}

// True when the server serves `conn`: a push for a job that does not
// exist is answered with a PUSH_ACK (UNAUTHENTICATED), changing nothing.
bool Served(client::DataConn& conn) {
  v1::Chunk fields;
  fields.set_job_id("no-such-job");
  fields.set_dtype(v1::DTYPE_FP32);
  const std::string frame = PushFrame(fields, kTestJobToken, std::string(16, '\0'));
  if (send(conn.fd(), frame.data(), frame.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(frame.size())) {
    return false;
  }
  FrameStart ack = Reply(conn);
  EXPECT_EQ(ack.header.type, FrameType::kPushAck) << ack.meta.message();
  return ack.header.type == FrameType::kPushAck;
}

// Expects `conn` refused: an ERROR frame (RESOURCE_EXHAUSTED) naming the
// flag and the cap, then the end of the connection.
void ExpectRefused(client::DataConn& conn, int cap) {
  FrameStart reply = Reply(conn);
  EXPECT_EQ(reply.header.type, FrameType::kError);
  EXPECT_EQ(reply.meta.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(reply.meta.message().find("--max_data_connections"), std::string::npos)
      << reply.meta.message();
  EXPECT_NE(reply.meta.message().find(absl::StrCat(cap, " connections")), std::string::npos)
      << reply.meta.message();
  EXPECT_NE(reply.meta.incarnation(), 0u);
  absl::StatusOr<std::optional<FrameStart>> after = RecvFrameStart(conn.stream());
  EXPECT_TRUE(after.ok() && !after->has_value()) << "the server kept the connection open";
}

TEST(DataConnectionCapTest, ConnectionsOverTheCapAreRefusedUntilOneCloses) {
  std::unique_ptr<ServerProcess> server = StartServer(2);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Metric(*server, kOpen), 0);
  EXPECT_EQ(Metric(*server, kRefused), 0);
  std::vector<std::unique_ptr<client::DataConn>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(Connect(*server));
    ASSERT_NE(held.back(), nullptr);
    ASSERT_TRUE(Served(*held.back())) << "connection " << i;
  }
  EXPECT_EQ(Metric(*server, kOpen), 2);

  std::unique_ptr<client::DataConn> third = Connect(*server);
  ASSERT_NE(third, nullptr);
  ExpectRefused(*third, 2);
  EXPECT_EQ(Metric(*server, kRefused), 1);
  EXPECT_EQ(Metric(*server, kOpen), 2);
  // The held connections are still served.
  for (auto& conn : held) EXPECT_TRUE(Served(*conn));

  held.pop_back();                 // closed: its session ends
  AwaitMetric(*server, kOpen, 1);  // once it has, there is room again
  std::unique_ptr<client::DataConn> fourth = Connect(*server);
  ASSERT_NE(fourth, nullptr);
  EXPECT_TRUE(Served(*fourth));
  EXPECT_EQ(Metric(*server, kOpen), 2);
  EXPECT_EQ(Metric(*server, kRefused), 1);
}

// The cap filled by raw connections: every data plane connection the client
// opens is refused, and each attempt goes over gRPC instead. Two steps'
// weights are bit-identical to the reference model's. With one stream per
// server, a stream sends more push frames than its window, so the refusal
// is often seen as a failed send (the server has closed) rather than as
// the first reply.
class ClientFallbackTest : public ::testing::TestWithParam<int> {};

TEST_P(ClientFallbackTest, ClientFallsBackToGrpcWhenRefused) {
  std::unique_ptr<ServerProcess> server = StartServer(1);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::DataConn> held = Connect(*server);
  ASSERT_NE(held, nullptr);
  ASSERT_TRUE(Served(*held));

  client::ClientOptions o = TestClientOptions({server->address()});
  o.max_attempts = 1;  // a refusal must not need a retry
  o.streams_per_server = GetParam();
  o.same_host_streams_per_server = 0;  // exactly GetParam() streams, on any host
  auto c = client::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto job = (*c)->RegisterJob(TestSpec("cap", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const Layout& layout = ref.layout();
  for (uint64_t step = 0; step < 2; ++step) {
    std::vector<float> g = NodeGradient(layout, 0, step);
    absl::Status pushed = (*job)->Push(step, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32);
    ASSERT_TRUE(pushed.ok()) << pushed;
    absl::Status stepped = (*job)->Step(step, 0.01f, 1.0f, false);
    ASSERT_TRUE(stepped.ok()) << stepped;
    ref.Step(step, {g}, 0.01f, 1.0f);
  }
  std::vector<float> got(layout.total_elems);
  absl::Status gathered = (*job)->Gather(2, {0, got.size()}, got.data(), v1::DTYPE_FP32);
  ASSERT_TRUE(gathered.ok()) << gathered;
  ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(), "weights");
  // The data plane refused the client's connections, and served none of
  // its frames: pushes and gathers went over gRPC.
  // (The one DataPush is the held connection's, from Served.)
  auto calls = [&](const std::string& method) {
    return Metric(*server,
                  absl::StrCat("zerostate_rpc_duration_seconds_count{method=\"", method, "\"}"));
  };
  EXPECT_GT(Metric(*server, kRefused), 0);
  EXPECT_GT(calls("PushGradients"), 0);
  EXPECT_GT(calls("Gather"), 0);
  EXPECT_EQ(calls("DataPush"), 1);
  EXPECT_EQ(calls("DataGather"), -1);
}

INSTANTIATE_TEST_SUITE_P(StreamsPerServer, ClientFallbackTest, ::testing::Values(1, 3));

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DataConnectionCapFlagTest, BadValuesAreRefusedNamingTheFlag) {
  const std::vector<std::vector<std::string>> bad = {
      {"--max_data_connections=0"},
      {"--max_data_connections=-1"},
      {"--max_data_connections=many"},
      {"--max_data_connections=0", "--data_listen=off"},  // refused even with the plane off
  };
  for (const std::vector<std::string>& flags : bad) {
    const std::string what = absl::StrJoin(flags, " ");
    char path[] = "/tmp/zs-data-cap-flag-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ServerProcessOptions o = TestServerOptions();
    o.args.insert(o.args.end(), flags.begin(), flags.end());
    o.stderr_path = path;
    auto server = ServerProcess::Start(o);
    EXPECT_FALSE(server.ok()) << what << " was accepted";
    const std::string log = ReadFile(path);
    unlink(path);
    EXPECT_NE(log.find("max_data_connections"), std::string::npos) << what << ": " << log;
  }
}

}  // namespace
}  // namespace zerostate::testing
