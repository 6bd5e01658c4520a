// A test fixture with a real etcd (tests/testing/etcd_process.h) and
// EtcdMembership members in cluster `cluster_` with 4 s leases; skips the
// test where /usr/bin/etcd is missing. Why 4 s: a member fences itself when
// a keepalive is 3 s overdue, which a loaded CI machine (ASan, 2 cores)
// does not reach by accident, and a lease still expires within seconds.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/membership/etcd_membership.h"
#include "tests/testing/etcd_process.h"

namespace zerostate::server {

inline constexpr int kTestTtlSeconds = 4;

class EtcdFixture : public ::testing::Test {
 protected:
  explicit EtcdFixture(std::string cluster) : cluster_(std::move(cluster)) {}

  void SetUp() override {
    if (!testing::EtcdProcess::Available()) GTEST_SKIP() << "no " << testing::kEtcdBinary;
    auto etcd = testing::EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }

  // Options of member `self`, dialing `endpoint` ("": etcd itself).
  EtcdMembershipOptions Options(const std::string& self, const std::string& endpoint = "") {
    EtcdMembershipOptions o;
    o.endpoints = {endpoint.empty() ? etcd_->endpoint() : endpoint};
    o.cluster = cluster_;
    o.self = self;
    o.lease_ttl_seconds = kTestTtlSeconds;
    return o;
  }

  // A started member (null, with a test failure, if it did not start).
  std::unique_ptr<EtcdMembership> Member(const std::string& self,
                                         const std::string& endpoint = "") {
    auto m = EtcdMembership::Start(Options(self, endpoint));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  // A plain etcd client, for what the test does behind the members' backs.
  std::unique_ptr<EtcdClient> Client() {
    auto c = EtcdClient::Create({{etcd_->endpoint()}, absl::Seconds(5)});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  const std::string cluster_;
  std::unique_ptr<testing::EtcdProcess> etcd_;
};

}  // namespace zerostate::server
