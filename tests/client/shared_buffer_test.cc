// Shared buffers (client/shared_buffer.h; SHM_BUFFER in
// server/dataplane/data_session.h) against a real zerostate-server process
// on this host: pushes from and gathers into shared buffers give the same
// bytes as from and into ordinary memory, fp32 and bf16 wires, with every
// byte moved in place (the client's zero-copy counter, asserted exactly);
// over TCP and gRPC they are ordinary memory; a frame naming a buffer not
// mapped, or a range outside one, is a bad frame; an unsealed memfd, an id
// mapped before and buffers past the caps are refused by name, and the
// job is left as it was; pushes beside waiting gathers keep their
// connections, so each buffer is handed over once per connection.
#include "client/shared_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "client/shm_conn.h"
#include "common/convert.h"
#include "common/frame_io.h"
#include "prometheus/registry.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/data_plane_helpers.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

// The client's zero-copy bytes of `op` ("push", "gather") over every server.
double ZeroCopyBytes(prometheus::Registry& r, const std::string& op) {
  double total = 0;
  for (const auto& family : r.Collect()) {
    if (family.name != "zerostate_client_zero_copy_bytes_total") continue;
    for (const auto& m : family.metric) {
      for (const auto& label : m.label) {
        if (label.name == "op" && label.value == op) total += m.counter.value;
      }
    }
  }
  return total;
}

class SharedBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = ServerProcess::Start(TestServerOptions());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const std::string& a = server_->data_address();
    ASSERT_TRUE(absl::SimpleAtoi(a.substr(a.rfind(':') + 1), &port_)) << a;
  }

  // A client (1 KiB chunks) with its own metrics registry.
  std::unique_ptr<client::Client> Connect(void (*edit)(client::ClientOptions&) = nullptr) {
    client::ClientOptions options = TestClientOptions({server_->address()});
    options.metrics = std::make_shared<prometheus::Registry>();
    if (edit != nullptr) edit(options);
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A raw same-host connection.
  std::unique_ptr<client::DataConn> RawConnection() {
    auto conn =
        client::ConnectSameHost(port_, Incarnation(), 1 << 20, absl::Now() + absl::Seconds(10));
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) return nullptr;
    (*conn)->stream().SetDeadline(absl::Now() + absl::Seconds(10));
    return *std::move(conn);
  }

  // The server's incarnation, from its SHM_READY to a raw hand-over.
  uint64_t Incarnation() {
    auto segment = ShmSegment::Create(4096);
    absl::StatusOr<int> fd = ConnectShm(port_);
    EXPECT_TRUE(segment.ok() && fd.ok());
    if (!segment.ok() || !fd.ok()) return 0;
    EXPECT_TRUE(SendSegmentFd(*fd, (*segment)->fd()).ok());
    DataStream stream(*fd);
    stream.SetDeadline(absl::Now() + absl::Seconds(10));
    auto ready = RecvFrameStart(stream);
    close(*fd);
    EXPECT_TRUE(ready.ok() && ready->has_value());
    return ready.ok() && ready->has_value() ? (*ready)->meta.incarnation() : 0;
  }

  // Sends SHM_BUFFER `id` with memfd `fd` (not owned; -1: none, one plain
  // byte instead) on `conn`; returns the answer.
  FrameStart OfferBuffer(client::DataConn& conn, uint32_t id, int fd) {
    v1::DataFrameMeta meta;
    meta.set_shm_buffer(id);
    EXPECT_TRUE(SendFrame(conn.stream(), FrameType::kShmBuffer, meta).ok());
    if (fd >= 0) {
      EXPECT_TRUE(SendSegmentFd(conn.fd(), fd).ok());
    } else {
      EXPECT_TRUE(Write(conn, "x"));
    }
    auto f = RecvFrameStart(conn.stream());
    EXPECT_TRUE(f.ok() && f->has_value()) << (f.ok() ? "closed" : f.status().ToString());
    return f.ok() && f->has_value() ? **f : FrameStart{};
  }

  // A PUSH of kPayload's 64 bytes claimed at (buffer, offset) on `conn`.
  FrameStart PushAt(client::DataConn& conn, const std::string& job, uint32_t buffer,
                    uint64_t offset) {
    v1::DataFrameMeta meta;
    meta.set_token(kTestJobToken);
    *meta.mutable_chunk() = PushFields(job);
    meta.set_shm_buffer(buffer);
    meta.set_shm_offset(offset);
    meta.set_shm_bytes(kPayload.size());
    EXPECT_TRUE(SendFrame(conn.stream(), FrameType::kPush, meta).ok());
    auto f = RecvFrameStart(conn.stream());
    EXPECT_TRUE(f.ok() && f->has_value()) << (f.ok() ? "closed" : f.status().ToString());
    return f.ok() && f->has_value() ? **f : FrameStart{};
  }

  std::unique_ptr<ServerProcess> server_;
  int port_ = 0;
};

// Three steps of a job pushed from and gathered into shared buffers, next
// to the same job through ordinary memory, on the same-host plane: the
// gathered bytes are identical every step (and equal the reference
// model's for fp32), and every pushed and gathered byte was moved in place.
TEST_F(SharedBufferTest, InPlacePushesAndGathersAreBitIdenticalToOrdinaryMemory) {
  for (v1::DType wire : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
    SCOPED_TRACE(DTypeName(wire));
    std::unique_ptr<client::Client> c = Connect();
    ASSERT_NE(c, nullptr);
    const std::string suffix = DTypeName(wire);
    auto shared_job = c->RegisterJob(TestSpec("shared-" + suffix, 1, wire, wire));
    auto plain_job = c->RegisterJob(TestSpec("plain-" + suffix, 1, wire, wire));
    ASSERT_TRUE(shared_job.ok() && plain_job.ok());
    ReferenceModel ref((*shared_job)->spec());
    const Layout& layout = ref.layout();
    const size_t esize = DTypeSize(wire);
    auto grad = c->AllocateShared(layout.used_elems * esize);
    auto weights = c->AllocateShared(layout.total_elems * esize);
    ASSERT_TRUE(grad.ok() && weights.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*grad)->data()) % 4096, 0u);
    struct stat st {};
    ASSERT_EQ(fstat((*grad)->segment().fd(), &st), 0);
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, (*grad)->size()) << "not allocated whole";
    EXPECT_NE((*grad)->id(), (*weights)->id());
    std::vector<uint8_t> plain_grad(layout.used_elems * esize);
    std::vector<uint8_t> plain_weights(layout.total_elems * esize);
    prometheus::Registry& metrics = *c->options().metrics;
    for (uint64_t step = 0; step < 3; ++step) {
      std::vector<float> g = NodeGradient(layout, 0, step);
      EncodeFloats(g.data(), g.size(), wire, (*grad)->data());
      EncodeFloats(g.data(), g.size(), wire, plain_grad.data());
      const double pushed = ZeroCopyBytes(metrics, "push");
      ASSERT_TRUE((*shared_job)->Push(step, 0, {0, layout.used_elems}, (*grad)->data(), wire).ok());
      EXPECT_EQ(ZeroCopyBytes(metrics, "push") - pushed, layout.used_elems * esize);
      ASSERT_TRUE(
          (*plain_job)->Push(step, 0, {0, layout.used_elems}, plain_grad.data(), wire).ok());
      EXPECT_EQ(ZeroCopyBytes(metrics, "push") - pushed, layout.used_elems * esize);
      ASSERT_TRUE((*shared_job)->Step(step, 0.01f, 1.0f, false).ok());
      ASSERT_TRUE((*plain_job)->Step(step, 0.01f, 1.0f, false).ok());
      ref.Step(step, {g}, 0.01f, 1.0f);
      const double gathered = ZeroCopyBytes(metrics, "gather");
      ASSERT_TRUE(
          (*shared_job)->Gather(step + 1, {0, layout.total_elems}, (*weights)->data(), wire).ok());
      EXPECT_EQ(ZeroCopyBytes(metrics, "gather") - gathered, layout.total_elems * esize);
      ASSERT_TRUE(
          (*plain_job)->Gather(step + 1, {0, layout.total_elems}, plain_weights.data(), wire).ok());
      EXPECT_EQ(ZeroCopyBytes(metrics, "gather") - gathered, layout.total_elems * esize);
      EXPECT_EQ(std::memcmp((*weights)->data(), plain_weights.data(), plain_weights.size()), 0)
          << "step " << step;
      if (wire == v1::DTYPE_FP32) {
        ExpectBitIdentical(reinterpret_cast<const float*>((*weights)->data()),
                           ref.GatheredWeights().data(), layout.total_elems, "weights");
      }
    }
  }
}

// Steps whose pushes run while the next version's gathers wait on the
// server (as under the worker's delayed update), each cut in four calls,
// so that the push pool and the gather pool both run every thread at
// once: up to 4 * streams_per_server connections. The client keeps them
// all between steps, so over the whole run the server is handed each of
// the two shared buffers at most once per connection. With 2 *
// streams_per_server idle connections, the rest were closed and reopened
// every step, each mapping the buffers anew (more hand-overs with every
// step): on the H200 host that cost a delayed-update step 150-300 ms.
TEST_F(SharedBufferTest, PushesBesideWaitingGathersReuseTheirConnectionsStepAfterStep) {
  ServerProcessOptions metered = TestServerOptions();
  metered.args.push_back("--metrics_listen=127.0.0.1:0");
  auto server = ServerProcess::Start(metered);
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions options = TestClientOptions({(*server)->address()});
  options.threads = 0;  // the pools' default: 2 * streams_per_server threads each
  auto c = client::Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  auto job = (*c)->RegisterJob(TestSpec("beside", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const Layout& layout = ref.layout();
  auto grad = (*c)->AllocateShared(layout.used_elems * sizeof(float));
  auto weights = (*c)->AllocateShared(layout.total_elems * sizeof(float));
  ASSERT_TRUE(grad.ok() && weights.ok());
  float* gathered = reinterpret_cast<float*>((*weights)->data());
  float* pushed = reinterpret_cast<float*>((*grad)->data());
  auto handovers = [&] {
    auto page = ScrapeMetrics((*server)->metrics_address(), absl::Seconds(10));
    EXPECT_TRUE(page.ok()) << page.status();
    return page.ok() ? MetricValue(*page, "zerostate_rpc_duration_seconds_count{method=\"ShmBuffer\"}")
                     : -1;
  };
  constexpr int kCalls = 4, kSteps = 12;
  for (uint64_t step = 0; step < kSteps; ++step) {
    std::vector<float> g = NodeGradient(layout, 0, step);
    std::memcpy(pushed, g.data(), g.size() * sizeof(float));
    std::vector<client::Ticket> gathers, pushes;
    for (int i = 0; i < kCalls; ++i) {
      const Range all{layout.total_elems * i / kCalls, layout.total_elems * (i + 1) / kCalls};
      gathers.push_back((*job)->GatherAsync(step + 1, all, gathered + all.begin, v1::DTYPE_FP32));
    }
    for (int i = 0; i < kCalls; ++i) {
      const Range used{layout.used_elems * i / kCalls, layout.used_elems * (i + 1) / kCalls};
      pushes.push_back((*job)->PushAsync(step, 0, used, pushed + used.begin, v1::DTYPE_FP32));
    }
    for (const client::Ticket& t : pushes) ASSERT_TRUE(t.Wait().ok()) << "step " << step;
    ASSERT_TRUE((*job)->Step(step, 0.01f, 1.0f, false).ok());
    for (const client::Ticket& t : gathers) ASSERT_TRUE(t.Wait().ok()) << "step " << step;
    ref.Step(step, {g}, 0.01f, 1.0f);
    ExpectBitIdentical(gathered, ref.GatheredWeights().data(), layout.total_elems, "weights");
  }
  const double most = 2 * 4 * (*c)->options().streams_per_server;
  const double handed = handovers();
  EXPECT_GT(handed, 0) << "no shared buffer was handed over: not on the same-host plane";
  EXPECT_LE(handed, most) << "connections were closed and opened again, and were handed the "
                             "buffers anew";
}

// With the same-host plane off (TCP) and with the data plane off (gRPC),
// a shared buffer is ordinary memory: the results equal the reference
// model's, and nothing is counted as moved in place.
TEST_F(SharedBufferTest, TcpAndGrpcSendFromSharedBuffersAsFromAnyMemory) {
  using Edit = void (*)(client::ClientOptions&);
  for (Edit edit : {Edit([](client::ClientOptions& o) { o.data_shm = false; }),
                    Edit([](client::ClientOptions& o) { o.data_plane = false; })}) {
    std::unique_ptr<client::Client> c = Connect(edit);
    ASSERT_NE(c, nullptr);
    const std::string id = c->options().data_plane ? "tcp" : "grpc";
    SCOPED_TRACE(id);
    auto job = c->RegisterJob(TestSpec(id, 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    ASSERT_TRUE(job.ok()) << job.status();
    ReferenceModel ref((*job)->spec());
    const Layout& layout = ref.layout();
    auto grad = c->AllocateShared(layout.used_elems * 4);
    auto weights = c->AllocateShared(layout.total_elems * 4);
    ASSERT_TRUE(grad.ok() && weights.ok());
    std::vector<float> g = NodeGradient(layout, 0, 0);
    std::memcpy((*grad)->data(), g.data(), g.size() * 4);
    ASSERT_TRUE((*job)->Push(0, 0, {0, layout.used_elems}, (*grad)->data(), v1::DTYPE_FP32).ok());
    ASSERT_TRUE((*job)->Step(0, 0.01f, 1.0f, false).ok());
    ref.Step(0, {g}, 0.01f, 1.0f);
    ASSERT_TRUE(
        (*job)->Gather(1, {0, layout.total_elems}, (*weights)->data(), v1::DTYPE_FP32).ok());
    ExpectBitIdentical(reinterpret_cast<const float*>((*weights)->data()),
                       ref.GatheredWeights().data(), layout.total_elems, "weights");
    EXPECT_EQ(ZeroCopyBytes(*c->options().metrics, "push"), 0);
    EXPECT_EQ(ZeroCopyBytes(*c->options().metrics, "gather"), 0);
  }
}

// One connection (one stream) pushing from 65 shared buffers, one after
// another: the server maps the first 64 (its cap per connection) and
// refuses the 65th; the client remembers the refusal and copies that
// push through the segment instead. Every push gets through, exactly 64
// of them in place, and the weights equal the reference model's.
TEST_F(SharedBufferTest, ABufferPastTheServersCapIsCopiedInstead) {
  std::unique_ptr<client::Client> c = Connect([](client::ClientOptions& o) {
    o.streams_per_server = 1;
    o.same_host_streams_per_server = 0;
  });
  ASSERT_NE(c, nullptr);
  auto job = c->RegisterJob(TestSpec("cap", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ReferenceModel ref((*job)->spec());
  const Layout& layout = ref.layout();
  std::vector<float> g = NodeGradient(layout, 0, 0);
  const size_t bytes = g.size() * 4;
  for (int i = 0; i < 65; ++i) {
    auto buffer = c->AllocateShared(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    std::memcpy((*buffer)->data(), g.data(), bytes);
    // The same gradient each time: the repeats are acknowledged as duplicates.
    ASSERT_TRUE(
        (*job)->Push(0, 0, {0, layout.used_elems}, (*buffer)->data(), v1::DTYPE_FP32).ok())
        << i;
  }
  EXPECT_EQ(ZeroCopyBytes(*c->options().metrics, "push"), 64.0 * bytes);
  ASSERT_TRUE((*job)->Step(0, 0.01f, 1.0f, false).ok());
  ref.Step(0, {g}, 0.01f, 1.0f);
  std::vector<float> got(layout.total_elems);
  ASSERT_TRUE((*job)->Gather(1, {0, got.size()}, got.data(), v1::DTYPE_FP32).ok());
  ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(), "weights");
}

// An attempt given up with an in-place push unacknowledged lets its
// connection go through AwaitServerClosed: it closes the client's side
// and returns once the server closed its end (the stream is at its end,
// long before the 60 s bound), which the server does after serving every
// frame it read: the push was applied (its retry is a duplicate), so the
// caller's buffer is no longer read once the call returns.
TEST_F(SharedBufferTest, AGivenUpConnectionIsLetGoOnceTheServerServedItsFrames) {
  std::unique_ptr<client::Client> c = Connect();
  ASSERT_NE(c, nullptr);
  auto job = c->RegisterJob(TestSpec("given-up", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  std::unique_ptr<client::DataConn> conn = RawConnection();
  ASSERT_NE(conn, nullptr);
  auto segment = ShmSegment::Create(4096, /*populate=*/true);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto buffer = std::make_shared<client::SharedBuffer>(1, *std::move(segment));
  ASSERT_TRUE(*client::ShareBuffer(*conn, buffer));
  std::memcpy(buffer->data(), kPayload.data(), kPayload.size());
  v1::DataFrameMeta meta;
  meta.set_token(kTestJobToken);
  *meta.mutable_chunk() = PushFields("given-up");
  meta.set_shm_buffer(1);
  meta.set_shm_bytes(kPayload.size());
  ASSERT_TRUE(SendFrame(conn->stream(), FrameType::kPush, meta).ok());
  client::AwaitServerClosed(*conn, absl::Now() + absl::Seconds(60));
  absl::StatusOr<size_t> after = conn->stream().RecvSome(&meta, 1);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, 0u) << "the server has not closed the connection";
  std::unique_ptr<client::DataConn> other = RawConnection();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(*client::ShareBuffer(*other, buffer));
  FrameStart retry = PushAt(*other, "given-up", 1, 0);
  ASSERT_EQ(retry.header.type, FrameType::kPushAck);
  EXPECT_EQ(retry.meta.code(), 0) << retry.meta.message();
  EXPECT_TRUE(retry.meta.duplicate());
}

// A PUSH naming a buffer not mapped on the connection, or a range outside
// a mapped one, is a bad frame (ERROR naming it, then closed); the job is
// left as it was.
TEST_F(SharedBufferTest, UnknownBufferOrRangeOutsideItIsABadFrame) {
  std::unique_ptr<client::Client> c = Connect();
  ASSERT_NE(c, nullptr);
  auto job = c->RegisterJob(TestSpec("bad", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  std::unique_ptr<client::DataConn> conn = RawConnection();
  ASSERT_NE(conn, nullptr);
  FrameStart unknown = PushAt(*conn, "bad", 7, 0);
  EXPECT_EQ(unknown.header.type, FrameType::kError);
  EXPECT_NE(unknown.meta.message().find("shm_buffer 7: no shared buffer of that id"),
            std::string::npos)
      << unknown.meta.message();

  conn = RawConnection();
  ASSERT_NE(conn, nullptr);
  auto segment = ShmSegment::Create(4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto buffer = std::make_shared<client::SharedBuffer>(3, *std::move(segment));
  absl::StatusOr<bool> mapped = client::ShareBuffer(*conn, buffer);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_TRUE(*mapped);
  EXPECT_EQ(conn->Mapped(3), buffer.get());
  FrameStart outside = PushAt(*conn, "bad", 3, 4096 - 16);
  EXPECT_EQ(outside.header.type, FrameType::kError);
  EXPECT_NE(outside.meta.message().find("shared buffer 3: shm range [4080, +64) outside"),
            std::string::npos)
      << outside.meta.message();
  ExpectJobUntouched(**job);
}

// What the server refuses to map, each answered SHM_READY with the reason
// (the connection goes on; the id stays unmapped): an unsealed memfd, an
// id mapped before, buffers past the cap of 64, bytes past the cap of
// 1 TiB (a sparse memfd). A SHM_BUFFER without its memfd is a bad frame.
TEST_F(SharedBufferTest, UnsealedDuplicateAndTooManyBuffersAreRefused) {
  std::unique_ptr<client::DataConn> conn = RawConnection();
  ASSERT_NE(conn, nullptr);
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  FrameStart refused = OfferBuffer(*conn, 1, unsealed);
  close(unsealed);
  EXPECT_EQ(refused.header.type, FrameType::kShmReady);
  EXPECT_EQ(refused.meta.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(refused.meta.message().find("shared buffer 1: shm segment: not a memfd sealed"),
            std::string::npos)
      << refused.meta.message();

  std::vector<std::unique_ptr<ShmSegment>> segments;
  for (uint32_t id = 1; id <= 65; ++id) {
    auto segment = ShmSegment::Create(4096);
    ASSERT_TRUE(segment.ok()) << segment.status();
    FrameStart ready = OfferBuffer(*conn, id, (*segment)->fd());
    segments.push_back(*std::move(segment));
    ASSERT_EQ(ready.header.type, FrameType::kShmReady);
    if (id <= 64) {
      ASSERT_EQ(ready.meta.code(), 0) << id << ": " << ready.meta.message();
      continue;
    }
    EXPECT_EQ(ready.meta.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
    EXPECT_NE(ready.meta.message().find("has 64 mapped, the cap of shared buffers per "
                                        "connection (max_shared_buffers)"),
              std::string::npos)
        << ready.meta.message();
  }
  FrameStart again = OfferBuffer(*conn, 2, segments[1]->fd());
  EXPECT_EQ(again.meta.code(), static_cast<int>(absl::StatusCode::kAlreadyExists));
  EXPECT_NE(again.meta.message().find("shared buffer 2 is mapped on this connection already"),
            std::string::npos)
      << again.meta.message();
  FrameStart unmapped = PushAt(*conn, "none", 65, 0);
  EXPECT_EQ(unmapped.header.type, FrameType::kError);
  EXPECT_NE(unmapped.meta.message().find("shm_buffer 65: no shared buffer"), std::string::npos)
      << unmapped.meta.message();

  conn = RawConnection();
  ASSERT_NE(conn, nullptr);
  int huge = memfd_create("huge", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(huge, 0);
  if (ftruncate(huge, (off_t{1} << 40) + 4096) == 0 &&
      fcntl(huge, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0) {
    FrameStart big = OfferBuffer(*conn, 1, huge);
    EXPECT_EQ(big.meta.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
    EXPECT_NE(big.meta.message().find("passes the cap of 1099511627776 bytes of shared buffers "
                                      "per connection (max_shared_bytes)"),
              std::string::npos)
        << big.meta.message();
  }
  close(huge);

  FrameStart no_fd = OfferBuffer(*conn, 2, -1);
  EXPECT_EQ(no_fd.header.type, FrameType::kError);
  EXPECT_NE(no_fd.meta.message().find("SHM_BUFFER 2 without its memfd"), std::string::npos)
      << no_fd.meta.message();
}

}  // namespace
}  // namespace zerostate::testing
