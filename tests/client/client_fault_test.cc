// The client when servers die, restart or stall under it: a clear error
// naming the server, or a successful retry, never a wrong tensor.
#include <signal.h>

#include <cstdlib>
#include <thread>

#include "prometheus/registry.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

using client::Client;
using client::JobClient;

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
}

std::unique_ptr<Client> Connect(const client::ClientOptions& o) {
  auto c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(ClientFaultTest, KilledServerIsNamedAndRestartedServerIsDetected) {
  auto cluster = ServerCluster::Start(2, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  // Retries span seconds: enough to reconnect to the restarted server.
  options.max_attempts = 25;
  options.initial_backoff = std::chrono::milliseconds(20);
  options.max_backoff = std::chrono::milliseconds(200);
  const std::string victim = (*cluster)->server(1).address();
  std::unique_ptr<Client> client = Connect(options);
  v1::JobSpec spec = TestSpec("fault", 1, v1::DTYPE_FP32, v1::DTYPE_FP32);
  auto job = client->RegisterJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  std::vector<float> g = NodeGradient(layout, 0, 0);

  // Down: every attempt fails; the error names the server.
  ASSERT_TRUE((*cluster)->server(1).Kill().ok());
  absl::Status s = (*job)->Push(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32);
  ExpectError(s, absl::StatusCode::kUnavailable, "PushGradients to " + victim);
  ExpectError(s, absl::StatusCode::kUnavailable, "after 25 attempts");

  // Back, but empty: the job's shard and its token are gone, and every call
  // says so (UNAUTHENTICATED: the server does not reveal which jobs exist).
  ASSERT_TRUE((*cluster)->server(1).Restart().ok());
  s = (*job)->Push(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32);
  ExpectError(s, absl::StatusCode::kUnauthenticated, victim);
  std::vector<float> w(layout.total_elems);
  s = (*job)->Gather(0, {0, layout.total_elems}, w.data(), v1::DTYPE_FP32);
  ExpectError(s, absl::StatusCode::kUnauthenticated, victim);

  // Registered again by someone else: the old handle notices the restart.
  std::unique_ptr<Client> other = Connect(options);
  ASSERT_TRUE(other->RegisterJob(spec).ok());
  s = (*job)->Push(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32);
  ExpectError(s, absl::StatusCode::kAborted, "server " + victim + " restarted");
  ExpectError((*job)->Step(0, 0.1f, 1.0f, false), absl::StatusCode::kAborted, victim);
}

TEST(ClientFaultTest, UnavailableWaitRidesOutARestartingServer) {
  auto cluster = ServerCluster::Start(2, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  // Two quick attempts alone give up long before the server is back.
  options.max_attempts = 2;
  options.initial_backoff = std::chrono::milliseconds(20);
  options.max_backoff = std::chrono::milliseconds(200);
  options.unavailable_wait = std::chrono::minutes(2);
  const std::string victim = (*cluster)->server(1).address();
  std::unique_ptr<Client> client = Connect(options);
  auto job = client->RegisterJob(TestSpec("absent", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  std::vector<float> g = NodeGradient(layout, 0, 0);

  ASSERT_TRUE((*cluster)->server(1).Kill().ok());
  client::Ticket push = (*job)->PushAsync(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32);
  // The push keeps trying while the server is away (the outage's length,
  // not a speed bound), then gets the restarted server's own answer: the
  // job's shard is gone, not "connection refused".
  absl::SleepFor(absl::Seconds(2));
  EXPECT_FALSE(push.Done());
  ASSERT_TRUE((*cluster)->server(1).Restart().ok());
  ExpectError(push.Wait(), absl::StatusCode::kUnauthenticated, victim);
}

// The attempts a call's error counts ("after N attempts"; none: 1).
int AttemptsOf(const absl::Status& s) {
  const size_t at = s.message().find("(after ");
  return at == absl::string_view::npos ? 1 : std::atoi(s.message().data() + at + 7);
}

// A restarted server's old data-plane connections, idle in the client's
// pool: the first that turns out broken takes the others with it, so the
// next attempt reaches the new process and hears that it lost the job,
// not one retry per stale connection (with unavailable_wait, for minutes).
TEST(ClientFaultTest, RestartedServerIsNamedAfterOneBrokenConnection) {
  auto cluster = ServerCluster::Start(1, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  options.streams_per_server = 4;  // 16 idle data-plane connections kept
  options.max_attempts = 30;
  options.unavailable_wait = std::chrono::minutes(2);
  const std::string victim = (*cluster)->server(0).address();
  std::unique_ptr<Client> client = Connect(options);
  auto job = client->RegisterJob(TestSpec("stale", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  // Gathers at once, each on connections of its own, idle afterwards.
  std::vector<std::vector<float>> out(8, std::vector<float>(layout.total_elems));
  std::vector<client::Ticket> gathers;
  for (std::vector<float>& w : out) {
    gathers.push_back((*job)->GatherAsync(0, {0, layout.total_elems}, w.data(), v1::DTYPE_FP32));
  }
  for (client::Ticket& t : gathers) ASSERT_TRUE(t.Wait().ok());

  ASSERT_TRUE((*cluster)->server(0).Kill().ok());
  ASSERT_TRUE((*cluster)->server(0).Restart().ok());
  std::vector<float> g(16, 1.0f);  // one chunk: one stream, one retry loop
  absl::Status s = (*job)->Push(0, 0, {0, 16}, g.data(), v1::DTYPE_FP32);
  ExpectError(s, absl::StatusCode::kUnauthenticated, "PushGradients to " + victim);
  ExpectError(s, absl::StatusCode::kUnauthenticated, "the job token is not valid");
  // A broken connection, then (if gRPC is still reconnecting) one more.
  EXPECT_LE(AttemptsOf(s), 3) << s;
}

TEST(ClientFaultTest, ShardsAtDifferentVersionsAreRefusedNamingEachServer) {
  auto cluster = ServerCluster::Start(2, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  options.initial_backoff = std::chrono::milliseconds(20);
  options.max_backoff = std::chrono::milliseconds(200);
  options.unavailable_wait = std::chrono::seconds(60);
  std::unique_ptr<Client> client = Connect(options);
  v1::JobSpec spec = TestSpec("mixed", 1, v1::DTYPE_FP32, v1::DTYPE_FP32);
  auto job = client->RegisterJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  std::vector<float> g = NodeGradient(layout, 0, 0);
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE((*job)->Push(step, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32).ok());
    ASSERT_TRUE((*job)->Step(step, 0.01f, 1.0f, false).ok());
  }
  ASSERT_EQ(*(*job)->Version(), 3u);
  // Server 1 restarts empty; a run started again registers a fresh shard
  // there, next to server 0's at version 3.
  ASSERT_TRUE((*cluster)->server(1).Kill().ok());
  ASSERT_TRUE((*cluster)->server(1).Restart().ok());
  const std::string a = (*cluster)->server(0).address(), b = (*cluster)->server(1).address();
  auto check = [&](const absl::Status& s) {
    ExpectError(s, absl::StatusCode::kFailedPrecondition, "shards disagree");
    ExpectError(s, absl::StatusCode::kFailedPrecondition, "server " + a + " at version 3");
    ExpectError(s, absl::StatusCode::kFailedPrecondition, "server " + b + " at version 0");
    ExpectError(s, absl::StatusCode::kFailedPrecondition, "restore");
    ExpectError(s, absl::StatusCode::kFailedPrecondition, "delete the job");
  };
  // The old handle names the server that lost its shard.
  ExpectError((*job)->Version().status(), absl::StatusCode::kAborted, "server " + b);
  std::unique_ptr<Client> again = Connect(options);
  check(again->RegisterJob(spec).status());
  check(again->AttachJob("mixed").status());
  // Deleting the job (what the message says) lets a run start over.
  ASSERT_TRUE((*job)->Delete().ok());
  auto fresh = again->RegisterJob(spec);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*(*fresh)->Version(), 0u);
}

// The transport hint (TLS or plaintext on both sides?) is for a server
// never reached; one that went away mid-run is reported without it.
TEST(ClientFaultTest, AServerGoneMidRunIsReportedWithoutTheTransportHint) {
  constexpr char kHint[] = "do both sides use TLS";
  auto cluster = ServerCluster::Start(1, TestServerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::ClientOptions options = TestClientOptions((*cluster)->addresses());
  options.initial_backoff = std::chrono::milliseconds(10);
  options.max_backoff = std::chrono::milliseconds(20);
  std::unique_ptr<Client> client = Connect(options);
  auto job = client->RegisterJob(TestSpec("gone", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*cluster)->server(0).Kill().ok());
  auto version = (*job)->Version();
  ExpectError(version.status(), absl::StatusCode::kUnavailable, (*cluster)->server(0).address());
  EXPECT_EQ(version.status().message().find(kHint), absl::string_view::npos) << version.status();
  // A client that never reached it gets the hint.
  std::unique_ptr<Client> fresh = Connect(options);
  auto never = fresh->RegisterJob(TestSpec("never", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ExpectError(never.status(), absl::StatusCode::kUnavailable, kHint);
}

TEST(ClientFaultTest, StalledServerIsRetriedAndAppliesThePushExactlyOnce) {
  auto server = ServerProcess::Start(TestServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions options = TestClientOptions({(*server)->address()});
  options.rpc_timeout = std::chrono::milliseconds(300);
  options.max_attempts = 100;  // rides out a stall of many seconds
  options.max_backoff = std::chrono::milliseconds(100);
  options.metrics = std::make_shared<prometheus::Registry>();
  std::unique_ptr<Client> client = Connect(options);
  auto job = client->RegisterJob(TestSpec("stall", 1, v1::DTYPE_BF16, v1::DTYPE_BF16));
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const uint64_t used = ref.layout().used_elems;
  std::vector<float> g = NodeGradient(ref.layout(), 0, 0);

  ASSERT_EQ(kill((*server)->pid(), SIGSTOP), 0);
  client::Ticket push = (*job)->PushAsync(0, 0, {0, used}, g.data(), v1::DTYPE_FP32);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // let attempts time out
  ASSERT_EQ(kill((*server)->pid(), SIGCONT), 0);
  ASSERT_TRUE(push.Wait().ok()) << push.Wait();
  // A second, identical push (a trainer's retry) is acknowledged and ignored.
  ASSERT_TRUE((*job)->Push(0, 0, {0, used}, g.data(), v1::DTYPE_FP32).ok());

  ASSERT_TRUE((*job)->Step(0, 0.05f, 1.0f, false).ok());
  ref.Step(0, {g}, 0.05f, 1.0f);
  std::vector<float> got(ref.layout().total_elems);
  ASSERT_TRUE((*job)->Gather(1, {0, got.size()}, got.data(), v1::DTYPE_FP32).ok());
  ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(), "weights");
}

TEST(ClientFaultTest, ServerErrorsNameTheServerAndTheProblem) {
  auto server = ServerProcess::Start(TestServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = Connect(TestClientOptions({(*server)->address()}));
  const std::string addr = (*server)->address();
  ExpectError(client->AttachJob("nope").status(), absl::StatusCode::kUnauthenticated,
              "JobStatus to " + addr);
  auto job = client->RegisterJob(TestSpec("errors", 2, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  // A job of the same id with another layout is refused by the server.
  v1::JobSpec other = TestSpec("errors", 3, v1::DTYPE_FP32, v1::DTYPE_FP32);
  ExpectError(client->RegisterJob(other).status(), absl::StatusCode::kAlreadyExists,
              "RegisterJob to " + addr);
  // A step far in the future.
  ExpectError((*job)->Step(1000, 0.1f, 1.0f, false), absl::StatusCode::kFailedPrecondition,
              "Step to " + addr);
  ExpectError((*job)->Step(0, std::nanf(""), 1.0f, false), absl::StatusCode::kInvalidArgument,
              "lr");
}

}  // namespace
}  // namespace zerostate::testing
