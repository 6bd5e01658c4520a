// ServerConn::Repoint (client/server_conn.h) without a server (channels
// connect lazily): the connection moves to a replacement's address, a stub
// taken before the move stays valid for a call in flight, the data plane's
// cut of the old address is lifted, and a repoint to the address it dials
// already changes nothing.
#include "client/server_conn.h"

#include <gtest/gtest.h>

#include <set>

#include "grpcpp/security/credentials.h"

namespace zerostate::client {
namespace {

ClientOptions TwoServers() {
  ClientOptions o;
  o.servers = {"127.0.0.1:1", "127.0.0.1:2"};
  o.channels_per_server = 2;
  return o;
}

TEST(ServerConnTest, RepointMovesTheConnectionAndKeepsTheOldStubsForCallsInFlight) {
  const ClientOptions options = TwoServers();
  ServerConn conn(options, 1, grpc::InsecureChannelCredentials());
  EXPECT_EQ(conn.address(), "127.0.0.1:2");
  v1::StateService::Stub* before = conn.NextStub();
  const auto old_channels = conn.channels();
  conn.cutter()->Cut("the old address stopped answering");
  ASSERT_FALSE(conn.cutter()->Check().ok());

  EXPECT_TRUE(conn.Repoint("127.0.0.1:9"));
  EXPECT_EQ(conn.address(), "127.0.0.1:9");
  EXPECT_TRUE(conn.cutter()->Check().ok()) << "the cut was of the old address";
  const auto channels = conn.channels();
  ASSERT_EQ(channels.size(), old_channels.size());
  std::set<grpc::Channel*> old;
  for (const auto& c : old_channels) old.insert(c.get());
  for (const auto& c : channels) EXPECT_FALSE(old.contains(c.get())) << "a channel was kept";
  for (size_t i = 0; i < 2 * channels.size(); ++i) {
    EXPECT_NE(conn.NextStub(), before) << "a call after the move went to the old address";
  }
  // The stub taken before the move is still alive (the ServerConn keeps
  // it): a call on it fails as a call to a dead server does, no crash.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  v1::JobStatusRequest req;
  v1::JobStatusResponse resp;
  EXPECT_FALSE(before->JobStatus(&ctx, req, &resp).ok());

  EXPECT_FALSE(conn.Repoint("127.0.0.1:9")) << "already dialled there";
  const auto same = conn.channels();
  EXPECT_EQ(same, channels);
}

}  // namespace
}  // namespace zerostate::client
