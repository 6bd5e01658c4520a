// zerostate-server processes in an etcd cluster (--etcd_endpoints): they
// join with a lease, leave at once on SIGTERM, expire a lease after
// SIGKILL, and a restart on the same address revokes its previous
// process's lease before it serves. Real etcd, real processes; skipped
// when /usr/bin/etcd is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "server/membership/etcd_membership.h"
#include "tests/server/membership/etcd_fixture.h"
#include "tests/testing/server_process.h"

namespace zerostate::server {
namespace {

using testing::ServerProcess;
using testing::ServerProcessOptions;

constexpr absl::Duration kBound = absl::Seconds(30);  // reached only on failure

class MembershipProcessTest : public EtcdFixture {
 protected:
  MembershipProcessTest() : EtcdFixture("proc") {}

  void SetUp() override {
    EtcdFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    observer_ = Member("observer:1");
    raw_ = Client();
    ASSERT_TRUE(observer_ && raw_);
  }

  ServerProcessOptions ServerOptions(std::vector<std::string> extra = {}) {
    ServerProcessOptions o;
    o.binary = ZEROSTATE_SERVER_PATH;
    o.args = {"--etcd_endpoints=" + etcd_->endpoint(),
              "--cluster=proc",
              absl::StrCat("--etcd_lease_ttl_seconds=", kTestTtlSeconds),
              "--threads=1",
              "--metrics_listen=127.0.0.1:0",
              "--ram_budget_bytes=67108864"};
    o.args.insert(o.args.end(), extra.begin(), extra.end());
    return o;
  }

  // A server on a fixed free port (membership needs one to advertise).
  std::unique_ptr<ServerProcess> StartServer() {
    ServerProcessOptions o = ServerOptions();
    o.fixed_port = true;
    auto s = ServerProcess::Start(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  std::vector<std::string> Members() {
    auto m = observer_->Members();
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : std::vector<std::string>{};
  }

  bool IsMember(const std::string& address) {
    auto m = Members();
    return std::find(m.begin(), m.end(), address) != m.end();
  }

  // The lease under the server's member key (0: none).
  int64_t LeaseOf(const std::string& address) {
    auto r = raw_->Range("/zerostate/proc/members/" + address);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->kvs_size() > 0 ? r->kvs(0).lease() : 0;
  }

  std::unique_ptr<EtcdMembership> observer_;
  std::unique_ptr<EtcdClient> raw_;
};

TEST_F(MembershipProcessTest, ServerJoinsAndLeavesAtOnceOnSigterm) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  EXPECT_TRUE(IsMember(server->address())) << "members: " << absl::StrJoin(Members(), ",");
  auto page = testing::ScrapeMetrics(server->metrics_address(), kBound);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(testing::MetricValue(*page, "zerostate_membership_lease_valid"), 1) << *page;
  ASSERT_TRUE(server->Stop().ok());
  // The lease was revoked before the process exited: no TTL to wait.
  EXPECT_FALSE(IsMember(server->address()));
}

TEST_F(MembershipProcessTest, KilledServersClaimsExpireAndBackupsHear) {
  absl::Notification lost;  // outlives observer_'s calls (cleared below)
  observer_->OnPrimaryLost([&](const std::string& job, int shard) {
    if (job == "job" && shard == 0 && !lost.HasBeenNotified()) lost.Notify();
  });
  auto server = StartServer();
  ASSERT_TRUE(server);
  const int64_t lease = LeaseOf(server->address());
  ASSERT_NE(lease, 0);
  // A claim on the server's lease, as its replication layer makes them.
  ASSERT_TRUE(raw_->Put(observer_->PrimaryKey("job", 0), server->address(), lease).ok());
  ASSERT_TRUE(server->Kill().ok());
  EXPECT_TRUE(lost.WaitForNotificationWithTimeout(kBound)) << "the claim outlived its lease";
  EXPECT_FALSE(IsMember(server->address()));
  observer_->OnPrimaryLost(nullptr);
}

TEST_F(MembershipProcessTest, RestartRevokesThePreviousProcesssLeaseBeforeServing) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  const int64_t first = LeaseOf(server->address());
  ASSERT_NE(first, 0);
  ASSERT_TRUE(raw_->Put(observer_->PrimaryKey("job", 1), server->address(), first).ok());
  ASSERT_TRUE(server->Kill().ok());
  ASSERT_TRUE(server->Restart().ok());
  // The restarted server printed its listening line after revoking the
  // old lease: the old claim is gone now, well within the old TTL.
  EXPECT_TRUE(absl::IsNotFound(observer_->Primary("job", 1).status()));
  const int64_t second = LeaseOf(server->address());
  EXPECT_NE(second, 0);
  EXPECT_NE(second, first);
}

TEST_F(MembershipProcessTest, BadMembershipFlagsStopTheServerNamingThem) {
  const std::string log = ::testing::TempDir() + "/membership_bad_flags.log";
  auto run = [&](std::vector<std::string> extra, int port) {
    std::remove(log.c_str());
    ServerProcessOptions o = ServerOptions(std::move(extra));
    o.stderr_path = log;
    auto s = ServerProcess::Start(o, port);
    EXPECT_FALSE(s.ok());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  int port = 0;
  int fd = testing::ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string unreachable = run({"--etcd_endpoints=127.0.0.1:1"}, port);
  EXPECT_NE(unreachable.find("etcd at 127.0.0.1:1: LeaseGrant"), std::string::npos) << unreachable;
  std::string ephemeral = run({}, 0);
  EXPECT_NE(ephemeral.find("advertise_address"), std::string::npos) << ephemeral;
  std::string ttl = run({"--etcd_lease_ttl_seconds=1"}, port);
  EXPECT_NE(ttl.find("etcd_lease_ttl_seconds: 1"), std::string::npos) << ttl;
  std::string scheme = run({"--etcd_endpoints=https://" + etcd_->endpoint()}, port);
  EXPECT_NE(scheme.find("TLS"), std::string::npos) << scheme;
  std::string name = run({"--replace=host-a"}, port);
  EXPECT_NE(name.find("replace: 'host-a' is not the HOST:PORT name"), std::string::npos) << name;
  std::string alone = run({"--etcd_endpoints=", "--replace=10.0.0.1:7070"}, port);
  EXPECT_NE(alone.find("replace: '10.0.0.1:7070' needs --etcd_endpoints"), std::string::npos)
      << alone;
}

}  // namespace
}  // namespace zerostate::server
