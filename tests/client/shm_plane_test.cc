// The same-host data plane (common/shm_segment.h, server/dataplane/shm_session.h,
// client/shm_conn.h) against a real zerostate-server process on this host:
// the client's pushes and gathers go through its shared memory segment by
// default, exactly once across a retry, and the weights are bit-identical
// to those of the TCP data plane and of gRPC; a wrong token is refused and
// leaves the job as it was; a frame whose payload lies outside the segment
// is a bad frame; the plane is off with --data_shm=false or
// ClientOptions::data_shm = false; and when the segment cannot be attached
// (another server answers, or the segment is not sealed) the client uses TCP.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "client/shm_conn.h"
#include "common/frame_io.h"
#include "common/shm_segment.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/data_plane_helpers.h"
#include "tests/client/reference_model.h"
#include "tests/testing/frame_cases.h"

namespace zerostate::testing {
namespace {

constexpr size_t kSegmentBytes = 1 << 20;

int PortOf(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
  return port;
}

// The calls the server's metrics count under `method` (-1: none).
double Calls(const std::string& metrics_address, const std::string& method) {
  auto page = ScrapeMetrics(metrics_address);
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return -2;
  return MetricValue(*page, "zerostate_rpc_duration_seconds_count{method=\"" + method + "\"}");
}

class ShmPlaneTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> flags = {}) {
    ServerProcessOptions o = TestServerOptions();
    o.args.push_back("--metrics_listen=127.0.0.1:0");
    for (std::string& f : flags) o.args.push_back(std::move(f));
    auto server = ServerProcess::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_FALSE(server_->data_address().empty());
    port_ = PortOf(server_->data_address());
  }

  // A job `id` (one node) through a client with `options` changed by `edit`.
  // With `big`, a fourth tensor larger than a segment of 1 KiB chunks.
  std::unique_ptr<client::JobClient> Job(const std::string& id,
                                         void (*edit)(client::ClientOptions&) = nullptr,
                                         bool big = false) {
    client::ClientOptions options = TestClientOptions({server_->address()});
    if (edit != nullptr) edit(options);
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    clients_.push_back(*std::move(c));
    v1::JobSpec spec = TestSpec(id, 1, v1::DTYPE_FP32, v1::DTYPE_FP32);
    if (big) {  // 80 KB of weights: more than a segment of 1 KiB chunks holds
      auto* t = spec.add_tensors();
      t->set_name("big");
      t->add_shape(20000);
    }
    auto job = clients_.back()->RegisterJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }

  // Hands `segment_fd` (not owned) to the same-host plane on a raw unix
  // socket; returns the server's first frame (SHM_READY) and keeps the
  // socket in *sock (closed by the caller).
  FrameStart HandOver(int segment_fd, int* sock) {
    absl::StatusOr<int> fd = ConnectShm(port_);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return {};
    *sock = *fd;
    EXPECT_TRUE(SendSegmentFd(*fd, segment_fd).ok());
    DataStream stream(*fd);
    stream.SetDeadline(absl::Now() + absl::Seconds(10));
    auto f = RecvFrameStart(stream);
    EXPECT_TRUE(f.ok() && f->has_value()) << (f.ok() ? "closed" : f.status().ToString());
    return f.ok() && f->has_value() ? **f : FrameStart{};
  }

  uint64_t Incarnation() {
    auto segment = ShmSegment::Create(4096);
    EXPECT_TRUE(segment.ok()) << segment.status();
    int sock = -1;
    FrameStart ready = HandOver((*segment)->fd(), &sock);
    close(sock);
    EXPECT_EQ(ready.header.type, FrameType::kShmReady);
    return ready.meta.incarnation();
  }

  // A raw same-host connection (through the client's own ConnectSameHost).
  std::unique_ptr<client::DataConn> Connect() {
    auto conn = client::ConnectSameHost(port_, Incarnation(), kSegmentBytes,
                                        absl::Now() + absl::Seconds(10));
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) return nullptr;
    (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(10));
    return *std::move(conn);
  }

  // Sends a PUSH of `fields` whose payload `payload` is first written at
  // `offset` of the connection's segment, claiming `bytes` (0: the
  // payload's size); returns the server's answer.
  FrameStart PushOn(client::DataConn& conn, const v1::Chunk& fields, const std::string& token,
                    const std::string& payload, uint64_t offset = 0, uint64_t bytes = 0) {
    // (Only what fits: a frame may claim more than the segment holds.)
    std::memcpy(conn.shm()->data() + offset, payload.data(),
                std::min<size_t>(payload.size(), conn.shm()->size() - offset));
    v1::DataFrameMeta meta;
    meta.set_token(token);
    *meta.mutable_chunk() = fields;
    meta.set_shm_offset(offset);
    meta.set_shm_bytes(bytes != 0 ? bytes : payload.size());
    EXPECT_TRUE(SendFrame(conn.stream(), FrameType::kPush, meta).ok());
    auto f = RecvFrameStart(conn.stream());
    EXPECT_TRUE(f.ok() && f->has_value()) << (f.ok() ? "closed" : f.status().ToString());
    return f.ok() && f->has_value() ? **f : FrameStart{};
  }

  // `job` takes a push, a step and a gather, all served by the TCP plane.
  void ExpectServedByTcp(client::JobClient& job) {
    ExpectJobUntouched(job);
    EXPECT_GT(Calls(server_->metrics_address(), "DataPush"), 0);
    EXPECT_EQ(Calls(server_->metrics_address(), "ShmPush"), -1);
    EXPECT_EQ(Calls(server_->metrics_address(), "ShmGather"), -1);
  }

  std::unique_ptr<ServerProcess> server_;
  int port_ = 0;
  std::vector<std::unique_ptr<client::Client>> clients_;
};

// Three steps of pushes, steps and gathers through each plane: every
// result equals the reference model's bit for bit, so the planes equal
// each other; the metrics show which plane served each client. With 1 KiB
// chunks the segment (8 slots, 32 KiB) is reused many times over by the
// pushes, and a gather of the job's 80 KB takes several GATHER frames.
TEST_F(ShmPlaneTest, WeightsAreBitIdenticalThroughSharedMemoryTcpAndGrpc) {
  StartServer();
  struct Plane {
    std::string job;
    void (*edit)(client::ClientOptions&);
  };
  const std::vector<Plane> planes = {
      {"shm", [](client::ClientOptions& o) { o.chunk_bytes = 1024; }},
      {"tcp",
       [](client::ClientOptions& o) {
         o.chunk_bytes = 1024;
         o.data_shm = false;
       }},
      {"grpc",
       [](client::ClientOptions& o) {
         o.chunk_bytes = 1024;
         o.data_plane = false;
       }},
  };
  for (const Plane& plane : planes) {
    SCOPED_TRACE(plane.job);
    const double shm_before = Calls(server_->metrics_address(), "ShmPush");
    const double tcp_before = Calls(server_->metrics_address(), "DataPush");
    std::unique_ptr<client::JobClient> job = Job(plane.job, plane.edit, /*big=*/true);
    ASSERT_NE(job, nullptr);
    ReferenceModel ref(job->spec());
    const Layout& layout = ref.layout();
    for (uint64_t step = 0; step < 3; ++step) {
      std::vector<float> g = NodeGradient(layout, 0, step);
      ASSERT_TRUE(job->Push(step, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32).ok());
      ASSERT_TRUE(job->Step(step, 0.01f, 1.0f, false).ok());
      ref.Step(step, {g}, 0.01f, 1.0f);
      std::vector<float> got(layout.total_elems);
      ASSERT_TRUE(job->Gather(step + 1, {0, got.size()}, got.data(), v1::DTYPE_FP32).ok());
      ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(), "weights");
    }
    const double shm_calls = Calls(server_->metrics_address(), "ShmPush");
    const double tcp_calls = Calls(server_->metrics_address(), "DataPush");
    EXPECT_EQ(shm_calls > shm_before, plane.job == "shm") << shm_before << " -> " << shm_calls;
    EXPECT_EQ(tcp_calls > tcp_before, plane.job == "tcp") << tcp_before << " -> " << tcp_calls;
  }
  EXPECT_GT(Calls(server_->metrics_address(), "ShmGather"), 0);
}

// A push retried on the same connection and on another one is applied
// once: the retries are acknowledged as duplicates.
TEST_F(ShmPlaneTest, RetriedPushIsAppliedExactlyOnce) {
  StartServer();
  std::unique_ptr<client::JobClient> job = Job("once");
  ASSERT_NE(job, nullptr);
  std::unique_ptr<client::DataConn> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_NE(conn->shm(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(conn->shm()->data()) % 4096, 0u);
  FrameStart first = PushOn(*conn, PushFields("once"), kTestJobToken, kPayload, 8192);
  ASSERT_EQ(first.header.type, FrameType::kPushAck);
  EXPECT_EQ(first.meta.code(), 0) << first.meta.message();
  EXPECT_FALSE(first.meta.duplicate());
  FrameStart again = PushOn(*conn, PushFields("once"), kTestJobToken, kPayload);
  EXPECT_EQ(again.meta.code(), 0) << again.meta.message();
  EXPECT_TRUE(again.meta.duplicate());
  std::unique_ptr<client::DataConn> other = Connect();
  ASSERT_NE(other, nullptr);
  FrameStart retry = PushOn(*other, PushFields("once"), kTestJobToken, kPayload);
  EXPECT_EQ(retry.meta.code(), 0) << retry.meta.message();
  EXPECT_TRUE(retry.meta.duplicate());
}

// A wrong token is refused as on TCP, and nothing of its payload applied.
TEST_F(ShmPlaneTest, WrongTokenIsRefusedAndChangesNothing) {
  StartServer();
  std::unique_ptr<client::JobClient> job = Job("token");
  ASSERT_NE(job, nullptr);
  std::unique_ptr<client::DataConn> conn = Connect();
  ASSERT_NE(conn, nullptr);
  FrameStart refused = PushOn(*conn, PushFields("token"), "not-the-token", kPayload);
  ASSERT_EQ(refused.header.type, FrameType::kPushAck);
  EXPECT_EQ(refused.meta.code(), static_cast<int>(absl::StatusCode::kUnauthenticated))
      << refused.meta.message();
  ExpectJobUntouched(*job);
}

// A payload outside the segment, or bytes after the frame on the socket,
// are bad frames: answered with an ERROR naming it, then closed; the job is
// left as it was.
TEST_F(ShmPlaneTest, PayloadOutsideTheSegmentIsABadFrame) {
  StartServer();
  std::unique_ptr<client::JobClient> job = Job("bad");
  ASSERT_NE(job, nullptr);
  std::unique_ptr<client::DataConn> conn = Connect();
  ASSERT_NE(conn, nullptr);
  FrameStart bad =
      PushOn(*conn, PushFields("bad"), kTestJobToken, kPayload, kSegmentBytes - 16, 64);
  EXPECT_EQ(bad.header.type, FrameType::kError);
  EXPECT_NE(bad.meta.message().find("outside the segment"), std::string::npos)
      << bad.meta.message();
  std::unique_ptr<client::DataConn> inline_payload = Connect();
  ASSERT_NE(inline_payload, nullptr);
  ASSERT_TRUE(Write(*inline_payload, PushFrame(PushFields("bad"), kTestJobToken, kPayload)));
  auto f = RecvFrameStart(inline_payload->stream());
  ASSERT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ((*f)->header.type, FrameType::kError);
  EXPECT_NE((*f)->meta.message().find("same-host"), std::string::npos) << (*f)->meta.message();
  ExpectJobUntouched(*job);
}

// A segment that is not sealed against shrinking could be truncated under
// the server (a fault on its access): refused, and the connection closed.
TEST_F(ShmPlaneTest, UnsealedSegmentIsRefused) {
  StartServer();
  int memfd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, 1 << 16), 0);
  int sock = -1;
  FrameStart ready = HandOver(memfd, &sock);
  close(memfd);
  close(sock);
  EXPECT_EQ(ready.header.type, FrameType::kShmReady);
  EXPECT_EQ(ready.meta.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(ready.meta.message().find("sealed"), std::string::npos) << ready.meta.message();
}

// --data_shm=false: no unix socket; the client's pool finds none and uses
// TCP from then on, and the pushes are served by the TCP plane.
TEST_F(ShmPlaneTest, ServerFlagTurnsItOff) {
  StartServer({"--data_shm=false"});
  EXPECT_FALSE(ConnectShm(port_).ok());
  client::DataConnPool pool(server_->data_address(), 1, nullptr,
                            client::SameHostPlane{port_, 0, kSegmentBytes});
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_EQ((*conn)->shm(), nullptr);
  EXPECT_FALSE(pool.tries_same_host());
  std::unique_ptr<client::JobClient> job = Job("flag");
  ASSERT_NE(job, nullptr);
  ExpectServedByTcp(*job);
}

TEST_F(ShmPlaneTest, ClientOptionTurnsItOff) {
  StartServer();
  std::unique_ptr<client::JobClient> job =
      Job("option", [](client::ClientOptions& o) { o.data_shm = false; });
  ASSERT_NE(job, nullptr);
  ExpectServedByTcp(*job);
}

// The server that answers on the unix socket is not the one registered
// with (another incarnation): the registered one is gone, and the TCP port
// it listened on belongs to whoever answers there now. The attach fails
// and so does Acquire, naming it (FAILED_PRECONDITION), with no TCP
// connection: the caller's call goes over gRPC, which says the server
// restarted. The pool tries the same-host plane again next time.
TEST_F(ShmPlaneTest, AnotherServerOnTheSocketIsNotReachedOverTcpEither) {
  StartServer();
  const uint64_t other = Incarnation() + 1;
  auto direct =
      client::ConnectSameHost(port_, other, kSegmentBytes, absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kFailedPrecondition) << direct.status();
  EXPECT_NE(direct.status().message().find("another server"), std::string::npos);
  const double tcp_before = Calls(server_->metrics_address(), "DataPush");
  client::DataConnPool pool(server_->data_address(), 1, nullptr,
                            client::SameHostPlane{port_, other, kSegmentBytes});
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kFailedPrecondition) << conn.status();
  EXPECT_NE(conn.status().message().find("another server"), std::string::npos) << conn.status();
  EXPECT_TRUE(pool.tries_same_host());
  EXPECT_EQ(Calls(server_->metrics_address(), "DataPush"), tcp_before);
}

// A server the pool attached to is stopped and something else takes its
// TCP port (as another program may, the port being free): Acquire fails
// (UNAVAILABLE, the unix socket's connect error) without connecting to that
// port, where the squatter sees no connection.
TEST_F(ShmPlaneTest, AServerThatIsGoneIsNotLookedForOnItsOldTcpPort) {
  StartServer();
  client::DataConnPool pool(server_->data_address(), 0, nullptr,
                            client::SameHostPlane{port_, Incarnation(), kSegmentBytes});
  {
    auto conn = pool.Acquire(absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_NE((*conn)->shm(), nullptr);
  }
  ASSERT_TRUE(server_->Stop().ok());
  const int squatter = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(squatter, 0);
  const int one = 1;
  setsockopt(squatter, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(squatter, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << errno;
  ASSERT_EQ(listen(squatter, 4), 0);
  auto conn = pool.Acquire(absl::Now() + absl::Seconds(5));
  EXPECT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable) << conn.status();
  EXPECT_NE(conn.status().message().find("shm connect"), std::string::npos) << conn.status();
  // Nothing reached the squatter.
  const int flags = fcntl(squatter, F_GETFL);
  fcntl(squatter, F_SETFL, flags | O_NONBLOCK);
  const int accepted = accept(squatter, nullptr, nullptr);
  EXPECT_LT(accepted, 0) << "the pool connected to the old TCP port";
  if (accepted >= 0) close(accepted);
  close(squatter);
}

}  // namespace
}  // namespace zerostate::testing
