// Which backup claims a lost primary's shard when (Takeover::ClaimDelay):
// the ring's order, a stagger apart; never a server without a copy. And
// which copy wins (Primaries::Serve under a fake membership, no timing): a
// copy in sync before one its primary recorded behind.
#include "server/replication/takeover.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zerostate::server {
namespace {

constexpr absl::Duration kStagger = absl::Milliseconds(500);

TEST(TakeoverTest, TheFirstBackupClaimsAtOnceTheNextOneAStaggerLater) {
  // 4 servers, k = 2: shard 3's copies are servers 3, 0, 1.
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 0, kStagger), absl::ZeroDuration());
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 1, kStagger), kStagger);
  // k = 1: the one backup, at once.
  EXPECT_EQ(Takeover::ClaimDelay(3, 1, 1, 2, kStagger), absl::ZeroDuration());
}

TEST(TakeoverTest, AServerWithoutACopyOrTheLostPrimaryItselfNeverClaims) {
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 2, kStagger), std::nullopt);  // not a copy
  EXPECT_EQ(Takeover::ClaimDelay(4, 2, 3, 3, kStagger), std::nullopt);  // the lost primary
  EXPECT_EQ(Takeover::ClaimDelay(3, 0, 1, 2, kStagger), std::nullopt);  // no backups
  EXPECT_EQ(Takeover::ClaimDelay(3, 1, 3, 0, kStagger), std::nullopt);  // no such shard
  EXPECT_EQ(Takeover::ClaimDelay(3, 3, 1, 0, kStagger), std::nullopt);  // k >= servers
  EXPECT_EQ(Takeover::ClaimDelay(0, 0, 0, 0, kStagger), std::nullopt);
}

// One cluster's claims, live members and behind records, as etcd keeps
// them, shared by its servers' views (FakeMembership): the claims and the
// records move only when a test says so.
struct FakeCluster {
  absl::Mutex mu;
  std::map<std::pair<std::string, int>, PrimaryTerm> claims ABSL_GUARDED_BY(mu);
  std::set<std::string> members ABSL_GUARDED_BY(mu);
  std::map<std::pair<std::string, int>, std::set<std::string>> behind ABSL_GUARDED_BY(mu);
  std::vector<std::function<void(const std::string&, int)>> on_lost ABSL_GUARDED_BY(mu);
  int64_t revision ABSL_GUARDED_BY(mu) = 0;

  // Server `self` dies: its member entry and claims go, and the others hear of each.
  void Die(const std::string& self) {
    std::vector<std::pair<std::string, int>> lost;
    std::vector<std::function<void(const std::string&, int)>> callbacks;
    {
      absl::MutexLock lock(&mu);
      members.erase(self);
      for (auto it = claims.begin(); it != claims.end();) {
        if (it->second.primary != self) {
          ++it;
          continue;
        }
        lost.push_back(it->first);
        it = claims.erase(it);
      }
      callbacks = on_lost;
    }
    for (const auto& [job, shard] : lost) {
      for (const auto& cb : callbacks) {
        if (cb) cb(job, shard);
      }
    }
  }
  // The holder of (job, shard)'s claim, once there is one.
  std::string AwaitHolder(const std::string& job, int shard) {
    absl::MutexLock lock(&mu);
    auto held = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return claims.contains({job, shard}); };
    mu.Await(absl::Condition(&held));
    return claims.at({job, shard}).primary;
  }
};

class FakeMembership final : public Membership {
 public:
  FakeMembership(FakeCluster& cluster, std::string self) : cluster_(cluster), self_(self) {
    absl::MutexLock lock(&cluster_.mu);
    cluster_.members.insert(self_);
    cluster_.on_lost.emplace_back();
    slot_ = cluster_.on_lost.size() - 1;
  }
  const std::string& self() const override { return self_; }
  absl::StatusOr<PrimaryTerm> Primary(const std::string& job, int shard) override {
    absl::MutexLock lock(&cluster_.mu);
    auto it = cluster_.claims.find({job, shard});
    if (it == cluster_.claims.end()) return absl::NotFoundError("no primary");
    return it->second;
  }
  absl::StatusOr<PrimaryTerm> Claim(const std::string& job, int shard) override {
    absl::MutexLock lock(&cluster_.mu);
    auto [it, fresh] = cluster_.claims.try_emplace({job, shard});
    if (fresh) it->second = PrimaryTerm{self_, ++cluster_.revision};
    return it->second;
  }
  bool LeaseValid() const override {
    absl::MutexLock lock(&cluster_.mu);
    return cluster_.members.contains(self_);
  }
  absl::Status SetBehind(const std::string& job, int shard, const PrimaryTerm& term,
                         const std::string& copy, bool behind) override {
    absl::MutexLock lock(&cluster_.mu);
    auto it = cluster_.claims.find({job, shard});
    if (it == cluster_.claims.end() || it->second.epoch != term.epoch) {
      return absl::FailedPreconditionError("the claim is not in force");
    }
    if (behind) {
      cluster_.behind[{job, shard}].insert(copy);
    } else {
      cluster_.behind[{job, shard}].erase(copy);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> Behind(const std::string& job, int shard) override {
    absl::MutexLock lock(&cluster_.mu);
    const std::set<std::string>& copies = cluster_.behind[{job, shard}];
    return std::vector<std::string>(copies.begin(), copies.end());
  }
  absl::StatusOr<std::vector<std::string>> Members() override {
    absl::MutexLock lock(&cluster_.mu);
    return std::vector<std::string>(cluster_.members.begin(), cluster_.members.end());
  }
  void OnPrimaryLost(std::function<void(const std::string&, int)> cb) override {
    absl::MutexLock lock(&cluster_.mu);
    cluster_.on_lost[slot_] = std::move(cb);
  }

 private:
  FakeCluster& cluster_;
  const std::string self_;
  size_t slot_ = 0;
};

constexpr char kToken[] = "takeover-test-token-0123456789abcdef0123456";

// One server of a 3-server cluster holding the k = 2 job "j" (a copy of
// every shard), with its membership view, primaries and takeover.
struct Server {
  Server(FakeCluster& cluster, uint32_t index)
      : membership(cluster, Address(index)),
        jobs(uint64_t{1} << 30),
        primaries(membership),
        takeover(membership, jobs, primaries, Takeover::Options{absl::ZeroDuration()}) {
    v1::RegisterJobRequest req;
    v1::JobSpec* spec = req.mutable_spec();
    spec->set_job_id("j");
    auto* w = spec->add_tensors();
    w->set_name("w");
    w->add_shape(3 * 1024);
    spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
    spec->set_num_nodes(1);
    spec->set_grad_dtype(v1::DTYPE_FP32);
    spec->set_weight_dtype(v1::DTYPE_FP32);
    spec->set_block_elems(1024);
    spec->set_replicas(2);
    for (uint32_t s = 0; s < 3; ++s) req.add_servers(Address(s));
    req.set_shard_index(index);
    EXPECT_TRUE(jobs.Register(req, kToken).ok());
  }
  static std::string Address(uint32_t index) { return absl::StrCat("s", index, ":1"); }
  absl::Status Serve(int shard) { return primaries.Serve(**jobs.GetShard("j", shard)); }

  FakeMembership membership;
  JobRegistry jobs;
  Primaries primaries;
  Takeover takeover;
};

// k = 2: shard 0's primary (server 0) recorded its backup on server 1
// behind (lost, then a step acknowledged without it), and died. Server 1,
// the first backup in ring order, is alive but must not take the shard
// while server 2, in sync, is: server 2 does, whichever asks first. Only
// once no copy in sync is alive may the one behind claim it.
TEST(TakeoverTest, ACopyInSyncTakesTheShardBeforeALiveCopyRecordedBehind) {
  FakeCluster cluster;
  Server s0(cluster, 0), s1(cluster, 1), s2(cluster, 2);
  ASSERT_TRUE(s0.Serve(0).ok());
  // Only the shard's primary records its copies.
  absl::Status not_primary = s1.primaries.SetBehind("j", 0, Server::Address(1), true);
  EXPECT_TRUE(absl::IsUnavailable(not_primary)) << not_primary;
  ASSERT_TRUE(s0.primaries.SetBehind("j", 0, Server::Address(1), true).ok());

  cluster.Die(Server::Address(0));  // both takeovers hear of it, and claim at once
  EXPECT_EQ(cluster.AwaitHolder("j", 0), Server::Address(2));
  // Beyond k: with no copy in sync alive, the one behind is the best left.
  cluster.Die(Server::Address(2));
  absl::Status none_in_sync = s1.Serve(0);
  EXPECT_TRUE(none_in_sync.ok()) << none_in_sync;
  EXPECT_EQ(cluster.AwaitHolder("j", 0), Server::Address(1));
}

TEST(TakeoverTest, ACopyRecordedBehindSaysWhichCopyInSyncTakesTheShard) {
  FakeCluster cluster;
  Server s0(cluster, 0), s1(cluster, 1), s2(cluster, 2);
  ASSERT_TRUE(s0.Serve(0).ok());
  ASSERT_TRUE(s0.primaries.SetBehind("j", 0, Server::Address(1), true).ok());
  s2.membership.OnPrimaryLost(nullptr);  // server 2's takeover does not hear of the loss
  s1.membership.OnPrimaryLost(nullptr);
  cluster.Die(Server::Address(0));
  absl::Status refused = s1.Serve(0);
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  for (const std::string& part :
       {std::string("not primary"), std::string("missed acknowledged steps"), Server::Address(2)}) {
    EXPECT_NE(refused.message().find(part), std::string::npos) << part << " in " << refused;
  }
  ASSERT_TRUE(s2.Serve(0).ok());
  // Caught up, the copy is recorded in sync by the new primary.
  ASSERT_TRUE(s2.primaries.SetBehind("j", 0, Server::Address(1), false).ok());
  EXPECT_TRUE(s1.membership.Behind("j", 0)->empty());
}

}  // namespace
}  // namespace zerostate::server
