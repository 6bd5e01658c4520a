// What an operator meets, against real server processes: a port already in
// use, a metrics port held by half-sent requests, the health service's names
// through a drain, and the grace period of waiting calls on SIGTERM.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/server/auth_fixture.h"
#include "tests/testing/server_process.h"
#include "zerostate/v1/state_service.grpc.pb.h"

namespace zerostate::testing {
namespace {

constexpr char kToken[] = "operations-test-token-0123456789abcdef";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ServerProcessOptions Options(std::vector<std::string> args, const std::string& log = "") {
  ServerProcessOptions opt;
  opt.binary = ZEROSTATE_SERVER_PATH;
  opt.args = {"--threads=1", "--ram_budget_bytes=100000000"};
  opt.args.insert(opt.args.end(), args.begin(), args.end());
  opt.stderr_path = log;
  return opt;
}

std::string LogPath(const std::string& name) {
  std::string path = absl::StrCat(::testing::TempDir(), "operations_", getpid(), "_", name, ".log");
  std::remove(path.c_str());
  return path;
}

// A second server on an address in use must not start, and must say which.
void ExpectRefusedToStart(const std::vector<std::string>& args, int port,
                          const std::string& address, const std::string& flag) {
  std::string log = LogPath(flag);
  auto second = ServerProcess::Start(Options(args, log), port);
  EXPECT_FALSE(second.ok()) << "a second server started on " << address;
  std::string text = ReadAll(log);
  EXPECT_NE(text.find(address), std::string::npos) << text;
  EXPECT_NE(text.find(flag), std::string::npos) << text;
}

TEST(OperationsTest, ASecondServerOnAnAddressInUseRefusesToStartNamingIt) {
  auto first = ServerProcess::Start(
      Options({"--metrics_listen=127.0.0.1:0", "--data_listen=127.0.0.1:0"}));
  ASSERT_TRUE(first.ok()) << first.status();
  const ServerProcess& s = **first;
  ASSERT_FALSE(s.data_address().empty());
  ExpectRefusedToStart({"--metrics_listen=", "--data_listen=off"}, s.port(), s.address(),
                       "listen");
  ExpectRefusedToStart({absl::StrCat("--metrics_listen=", s.metrics_address()),
                        "--data_listen=off"},
                       0, s.metrics_address(), "metrics_listen");
  ExpectRefusedToStart({"--metrics_listen=", absl::StrCat("--data_listen=", s.data_address())}, 0,
                       s.data_address(), "data_listen");
}

// A TCP connection to `address` that sent half an HTTP request, held open.
int HalfSentRequest(const std::string& address) {
  size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(colon + 1), &port));
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string half = "GET /metrics HTTP/1.1\r\nHost: loc";
  EXPECT_EQ(write(fd, half.data(), half.size()), static_cast<ssize_t>(half.size()));
  return fd;
}

// civetweb waited 30 s for a request's headers on each of prometheus-cpp's
// two threads: two half-sent requests blocked every scrape. The scrape's
// own timeout (10 s) is the one of a Prometheus scrape.
TEST(OperationsTest, HalfSentRequestsDoNotBlockScrapes) {
  auto server = ServerProcess::Start(Options({"--metrics_listen=127.0.0.1:0"}));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string& metrics = (*server)->metrics_address();
  std::vector<int> held;
  for (int i = 0; i < 2; ++i) held.push_back(HalfSentRequest(metrics));
  auto page = ScrapeMetrics(metrics, absl::Seconds(10));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find("zerostate_"), std::string::npos);
  // As many as there are threads: each is dropped at the request timeout.
  for (int i = 0; i < 8; ++i) held.push_back(HalfSentRequest(metrics));
  page = ScrapeMetrics(metrics, absl::Seconds(20));
  EXPECT_TRUE(page.ok()) << page.status();
  for (int fd : held) close(fd);
}

// grpc.health.v1 messages: HealthCheckRequest{service = 1},
// HealthCheckResponse{status = 1}; 1 = SERVING, 2 = NOT_SERVING.
grpc::ByteBuffer HealthRequest(const std::string& service) {
  std::string bytes;
  if (!service.empty()) bytes = absl::StrCat("\x0a", std::string(1, char(service.size())), service);
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

int HealthStatusOf(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : -1;
}

// Health/Check: the status, or -code for an error.
int Check(grpc::GenericStub& stub, const std::string& service) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request = HealthRequest(service), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  return s.ok() ? HealthStatusOf(response) : -static_cast<int>(s.error_code());
}

// A Health/Watch stream of one service on a completion queue.
class Watch {
 public:
  Watch(grpc::GenericStub& stub, const std::string& service) {
    call_ = stub.PrepareCall(&ctx_, "/grpc.health.v1.Health/Watch", &cq_);
    call_->StartCall(Tag(1));
    Next();
    grpc::ByteBuffer request = HealthRequest(service);
    call_->WriteLast(request, grpc::WriteOptions(), Tag(2));
    Next();
  }
  ~Watch() {
    ctx_.TryCancel();
    grpc::Status status;
    call_->Finish(&status, Tag(3));
    Next();
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  // The next status the stream reports; -1 when it ended.
  int Read() {
    grpc::ByteBuffer message;
    call_->Read(&message, Tag(4));
    return Next() ? HealthStatusOf(message) : -1;
  }

 private:
  static void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }
  bool Next() {
    void* tag;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok;
  }
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

TEST(OperationsTest, HealthAnswersForTheServiceNameAndBothFollowTheDrain) {
  auto server = ServerProcess::Start(Options({"--metrics_listen=", "--grace_seconds=30"}));
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  EXPECT_EQ(Check(stub, ""), 1);
  EXPECT_EQ(Check(stub, "zerostate.v1.StateService"), 1);
  EXPECT_EQ(Check(stub, "no.such.Service"), -grpc::StatusCode::NOT_FOUND);
  Watch all(stub, ""), named(stub, "zerostate.v1.StateService");
  ASSERT_EQ(all.Read(), 1);
  ASSERT_EQ(named.Read(), 1);
  ASSERT_EQ(kill((*server)->pid(), SIGTERM), 0);
  EXPECT_EQ(all.Read(), 2);
  EXPECT_EQ(named.Read(), 2);
}

// docs/operations.md: on SIGTERM in-flight calls get --grace_seconds. A
// rendezvous waiting for a rank ends by its own deadline within the grace,
// not with UNAVAILABLE at the signal.
TEST(OperationsTest, WaitingCallsGetTheGracePeriodOnSigterm) {
  auto server = ServerProcess::Start(Options({"--metrics_listen=", "--grace_seconds=60"}));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::StateService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  auto waiting = std::async(std::launch::async, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata("zerostate-job-token", kToken);
    v1::RendezvousRequest req;
    req.set_job_id("grace");
    req.set_key("k");
    req.set_rank(0);
    req.set_world(2);
    v1::RendezvousResponse resp;
    return stub->Rendezvous(&ctx, req, &resp);
  });
  // A call answered after the rendezvous was sent on the same connection:
  // the rendezvous is in the server by then.
  grpc::ClientContext probe;
  probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::JobStatusRequest req;
  req.set_job_id("none");
  v1::JobStatusResponse resp;
  (void)stub->JobStatus(&probe, req, &resp);
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill((*server)->pid(), SIGTERM), 0);
  grpc::Status s = waiting.get();
  // The server answers DEADLINE_EXCEEDED half a second before the call's
  // deadline; on a loaded machine that answer can cross the deadline on its
  // way, and gRPC then reports CANCELLED. Either way the call ran to its
  // own deadline, not to the signal.
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
              s.error_code() == grpc::StatusCode::CANCELLED)
      << s.error_code() << " " << s.error_message();
  EXPECT_GE(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(3))
      << "the waiting call ended at the signal, not by its deadline";
  EXPECT_TRUE((*server)->Stop().ok()) << "the server exits cleanly after its last call";
}

// docs/operations.md: the NVMe tier's file is scratch space that goes with
// the process, however it ends.
TEST(OperationsTest, TheNvmeScratchFileDoesNotSurviveKill9) {
  std::string dir = absl::StrCat(::testing::TempDir(), "operations_nvme_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto server = ServerProcess::Start(Options({"--metrics_listen=", "--nvme_dir=" + dir}));
  ASSERT_TRUE(server.ok()) << server.status();
  for (int incarnation = 0; incarnation < 2; ++incarnation) {
    auto stub = v1::StateService::NewStub(
        grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
    v1::RegisterJobRequest req = JobRequest("on-nvme", (*server)->address());
    req.mutable_spec()->set_tier(v1::TIER_NVME);
    v1::RegisterJobResponse resp;
    grpc::Status s = stub->RegisterJob(Ctx(kToken).get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE((*server)->Kill().ok());
    std::vector<std::string> left;
    for (const auto& f : std::filesystem::directory_iterator(dir)) left.push_back(f.path());
    EXPECT_TRUE(left.empty()) << "left behind by kill -9: " << left.front();
    if (incarnation == 0) { ASSERT_TRUE((*server)->Restart().ok()); }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zerostate::testing
