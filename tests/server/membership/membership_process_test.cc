// zerostate-server processes in an etcd cluster (--etcd_endpoints): they
// join with a lease, leave at once on SIGTERM, expire a lease after
// SIGKILL, and a restart on the same address revokes its previous
// process's lease before it serves; a replacement on another address
// (--replace) is refused while the old process lives, takes a hung one's
// name once its lease lapsed, and the woken old process fences itself.
// Real etcd, real processes; skipped when /usr/bin/etcd is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
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

// The whole of a log file ("" if none).
std::string ReadLog(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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

  // Where the observer dials the server named `name`.
  std::string Dialled(const std::string& name) {
    auto r = observer_->Resolve(name);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
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
    return ReadLog(log);
  };
  int port = 0;
  int fd = testing::ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string unreachable = run({"--etcd_endpoints=127.0.0.1:1"}, port);
  EXPECT_NE(unreachable.find("etcd at 127.0.0.1:1: Range"), std::string::npos) << unreachable;
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
  const std::string own_address = absl::StrCat("127.0.0.1:", port);
  std::string own = run({"--replace=" + own_address}, port);
  EXPECT_NE(own.find("replace: '" + own_address + "' is this server's own address"),
            std::string::npos)
      << own;
  std::string never = run({"--replace=127.0.0.1:1"}, port);
  EXPECT_NE(never.find("replace: '127.0.0.1:1' was never a member of cluster 'proc'"),
            std::string::npos)
      << never;
  std::string wait = run({"--replace_wait_seconds=-2"}, port);
  EXPECT_NE(wait.find("replace_wait_seconds: -2"), std::string::npos) << wait;
  EXPECT_EQ(Members(), std::vector<std::string>{"observer:1"});  // none joined
}

// One process per name. A replacement (--replace) of a live server is
// refused by name, its member key as it was; of a hung one (SIGSTOP) it
// takes the name once the old lease lapsed; the old process, woken
// (SIGCONT), finds its name held by the replacement, fences itself and
// exits with status 3, leaving the replacement's member key alone.
TEST_F(MembershipProcessTest, AReplacementWaitsOutALiveServerAndTheWokenOldOneFencesItself) {
  const std::string old_log = ::testing::TempDir() + "/replaced_old.log";
  const std::string new_log = ::testing::TempDir() + "/replacement.log";
  std::remove(old_log.c_str());
  std::remove(new_log.c_str());
  ServerProcessOptions o = ServerOptions();
  o.fixed_port = true;
  o.stderr_path = old_log;
  auto old = ServerProcess::Start(o);
  ASSERT_TRUE(old.ok()) << old.status();
  const std::string name = (*old)->address();
  const int64_t lease = LeaseOf(name);
  ASSERT_NE(lease, 0);

  ServerProcessOptions r = ServerOptions({"--replace=" + name});
  r.fixed_port = true;
  r.stderr_path = new_log;
  auto refused = ServerProcess::Start(r);
  ASSERT_FALSE(refused.ok()) << "a replacement started beside the live " << name;
  const std::string why = ReadLog(new_log);
  EXPECT_NE(why.find(absl::StrCat("replace: ", name, " is alive: its lease ", lease,
                                  " is kept alive by the process at ", name)),
            std::string::npos)
      << why;
  EXPECT_EQ(LeaseOf(name), lease);
  EXPECT_EQ(Dialled(name), name);

  ASSERT_EQ(kill((*old)->pid(), SIGSTOP), 0);
  auto replacement = ServerProcess::Start(r);  // once the hung one's lease lapsed
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  const std::string moved = (*replacement)->address();
  const int64_t taken = LeaseOf(name);
  EXPECT_NE(taken, 0);
  EXPECT_NE(taken, lease);
  EXPECT_EQ(Dialled(name), moved);

  ASSERT_EQ(kill((*old)->pid(), SIGCONT), 0);
  auto exited = (*old)->WaitExit(kBound);
  ASSERT_TRUE(exited.ok()) << "the woken old server kept running: " << exited.status();
  EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) == 3) << "wait status " << *exited;
  const std::string fenced = ReadLog(old_log);
  EXPECT_NE(fenced.find(absl::StrCat("this server's name ", name, " is held by the process at ",
                                     moved, " (lease ", taken, ")")),
            std::string::npos)
      << fenced;
  EXPECT_NE(fenced.find("fenced for good"), std::string::npos) << fenced;
  EXPECT_EQ(LeaseOf(name), taken);
  EXPECT_EQ(Dialled(name), moved);
}

}  // namespace
}  // namespace zerostate::server
