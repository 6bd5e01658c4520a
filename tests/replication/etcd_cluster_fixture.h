// Shared setup of the replicated-shard tests whose servers' membership is
// a real etcd (tests/testing/etcd_process.h, 4 s leases): three
// zerostate-server processes started with --etcd_endpoints on fixed ports,
// each with its own endpoint (etcd itself, or a FaultProxy in front of it)
// and the same extra flags; a job of two nodes trained step by step and
// checked against the reference. Skipped where /usr/bin/etcd is missing.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/replication/replication_fixture.h"
#include "tests/server/membership/etcd_fixture.h"

namespace zerostate::server {

inline constexpr int kEtcdServers = 3;

class EtcdClusterFixture : public EtcdFixture {
 protected:
  explicit EtcdClusterFixture(std::string cluster) : EtcdFixture(std::move(cluster)) {}

  void SetUp() override {
    EtcdFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    observer_ = Member("observer:1");
    ASSERT_TRUE(observer_);
  }

  // Starts the servers. Server i dials etcd at `endpoints[i]` (missing or
  // empty: etcd itself) and gets `extra` flags after the membership's.
  void StartServers(const std::vector<std::string>& extra = {},
                    const std::vector<std::string>& endpoints = {}) {
    for (int i = 0; i < kEtcdServers; ++i) {
      testing::ServerProcessOptions o = testing::MeteredServerOptions();
      const bool own = i < static_cast<int>(endpoints.size()) && !endpoints[i].empty();
      o.args.push_back("--etcd_endpoints=" + (own ? endpoints[i] : etcd_->endpoint()));
      o.args.push_back("--cluster=" + cluster_);
      o.args.push_back(absl::StrCat("--etcd_lease_ttl_seconds=", kTestTtlSeconds));
      o.args.insert(o.args.end(), extra.begin(), extra.end());
      o.fixed_port = true;  // advertised in etcd
      auto server = testing::ServerProcess::Start(o);
      ASSERT_TRUE(server.ok()) << "server " << i << ": " << server.status();
      addresses_.push_back((*server)->address());
      servers_.push_back(*std::move(server));
      options_.push_back(std::move(o));
    }
  }

  // Starts a replacement of server i (killed, or hung) on another port,
  // with its flags and --replace=<its address>; it starts once the old
  // process's lease lapsed. server(i) is the new process from then on, and
  // addresses()[i] still its name; the old process goes to `old` (null:
  // dropped, killed if it still runs).
  void Replace(int i, std::unique_ptr<testing::ServerProcess>* old = nullptr) {
    testing::ServerProcessOptions o = options_[i];
    o.args.push_back("--replace=" + addresses_[i]);
    auto server = testing::ServerProcess::Start(o);
    ASSERT_TRUE(server.ok()) << "replacement of server " << i << ": " << server.status();
    ASSERT_NE((*server)->address(), addresses_[i]);
    std::unique_ptr<testing::ServerProcess> previous = std::exchange(servers_[i], *std::move(server));
    if (old != nullptr) *old = std::move(previous);
  }

  testing::ServerProcess& server(int i) { return *servers_[i]; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  // Runs steps [from, to) of `run`, each checked against `ref`;
  // `after_push` (if set) on node 0 once its push of step `from` is in.
  void Train(testing::ReplicatedRun& run, testing::ReferenceModel& ref, uint64_t from,
             uint64_t to, const std::function<void()>& after_push = nullptr) {
    testing::TrainSteps(run.nodes, ref, from, to, after_push);
  }

  // The server etcd names as the primary of `shard` ("" with a failure
  // when none).
  std::string PrimaryOf(const std::string& job, int shard) {
    auto term = observer_->Primary(job, shard);
    EXPECT_TRUE(term.ok()) << "shard " << shard << ": " << term.status();
    return term.ok() ? term->primary : "";
  }

  std::unique_ptr<EtcdMembership> observer_;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers_;
  std::vector<std::string> addresses_;
  std::vector<testing::ServerProcessOptions> options_;  // each server's, for Replace
};

// The test-file helpers of replication_fixture.h.
using testing::AwaitFile;
using testing::TestDirectory;
using testing::Touch;

}  // namespace zerostate::server
