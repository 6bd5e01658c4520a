// The race the etcd chaos loop found, driven by a hook instead of timing:
// a primary fenced while a call runs (its lease lapsed: it answers "not
// primary ... fenced"), which rejoins the membership with its claim
// between the client's retrier giving up and the client's probe of it
// (ClientOptions::before_failover_probe). The probe finds it the shard's
// primary again, and the interrupted call runs there again instead of
// failing the step. Three in-process servers whose membership is a table
// this test holds (each server's lease valid unless the test fences it).
#include <atomic>

#include "absl/container/flat_hash_map.h"
#include "server/state_server.h"
#include "tests/replication/replication_fixture.h"

namespace zerostate::server {
namespace {

// The claims of the test's servers, shared: a claim stays while its
// holder is fenced (its lease has not expired yet, as in etcd).
struct SharedClaims {
  absl::Mutex mu;
  absl::flat_hash_map<std::pair<std::string, int>, PrimaryTerm> held ABSL_GUARDED_BY(mu);
  int64_t epoch ABSL_GUARDED_BY(mu) = 0;
};

class TableMembership final : public Membership {
 public:
  explicit TableMembership(std::shared_ptr<SharedClaims> claims) : claims_(std::move(claims)) {}
  // REQUIRES: before the server is called.
  void set_self(std::string self) { self_ = std::move(self); }
  void SetLeaseValid(bool valid) { valid_ = valid; }
  // Called with the shard at each Claim, before it is decided.
  void OnClaim(std::function<void(int shard)> hook) {
    absl::MutexLock lock(&hook_mu_);
    on_claim_ = std::move(hook);
  }

  const std::string& self() const override { return self_; }
  absl::StatusOr<PrimaryTerm> Primary(const std::string& job, int shard) override {
    absl::MutexLock lock(&claims_->mu);
    auto it = claims_->held.find({job, shard});
    if (it == claims_->held.end()) return absl::NotFoundError("no primary");
    return it->second;
  }
  absl::StatusOr<PrimaryTerm> Claim(const std::string& job, int shard) override {
    {
      absl::MutexLock lock(&hook_mu_);
      if (on_claim_) on_claim_(shard);
    }
    if (!valid_) return absl::FailedPreconditionError("fenced");
    absl::MutexLock lock(&claims_->mu);
    auto [it, fresh] = claims_->held.try_emplace(std::make_pair(job, shard));
    if (fresh) it->second = {self_, ++claims_->epoch};
    return it->second;
  }
  bool LeaseValid() const override { return valid_; }
  absl::StatusOr<std::vector<std::string>> Members() override {
    return absl::UnimplementedError("not needed");
  }
  void OnPrimaryLost(std::function<void(const std::string&, int)>) override {}

 private:
  const std::shared_ptr<SharedClaims> claims_;
  std::string self_;
  std::atomic<bool> valid_{true};
  absl::Mutex hook_mu_;
  std::function<void(int shard)> on_claim_ ABSL_GUARDED_BY(hook_mu_);
};

// Three in-process servers over one claims table.
struct TableCluster {
  TableCluster() {
    auto claims = std::make_shared<SharedClaims>();
    for (int i = 0; i < 3; ++i) {
      members.push_back(std::make_shared<TableMembership>(claims));
      ServerOptions opt;
      opt.listen = "127.0.0.1:0";
      opt.metrics_listen = "";
      opt.tls.plaintext = true;
      opt.membership = members.back();
      auto server = StateServer::Start(opt);
      if (!server.ok()) {
        ADD_FAILURE() << server.status();
        return;
      }
      members.back()->set_self((*server)->address());
      addresses.push_back((*server)->address());
      servers.push_back(*std::move(server));
    }
  }
  std::vector<std::shared_ptr<TableMembership>> members;
  std::vector<std::unique_ptr<StateServer>> servers;
  std::vector<std::string> addresses;
};

TEST(FailoverRaceTest, AFencedPrimaryThatRejoinsBeforeTheProbeGetsTheCallAgain) {
  TableCluster c;
  ASSERT_EQ(c.servers.size(), 3u);
  auto& members = c.members;
  auto& addresses = c.addresses;
  // Server 1 (shard 1's primary) rejoins, with its claim, when a client
  // gives up on it and is about to probe it.
  std::atomic<int> probes{0};
  auto hook = [&](int shard, int server) {
    if (shard != 1 || server != 1) return;
    ++probes;
    members[1]->SetLeaseValid(true);
  };
  v1::JobSpec spec = testing::ReplicatedSpec("race", 1);
  auto run = testing::StartNodes(spec, addresses, hook);
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());
  testing::TrainSteps(run->nodes, ref, 0, 2);
  // Fenced after node 0's push of step 2: its Step meets the fence.
  testing::TrainSteps(run->nodes, ref, 2, 4, [&] { members[1]->SetLeaseValid(false); });
  EXPECT_GE(probes.load(), 1) << "no call failed over from the fenced server";
  auto term = members[0]->Primary("race", 1);
  ASSERT_TRUE(term.ok()) << term.status();
  EXPECT_EQ(term->primary, addresses[1]) << "shard 1 moved";
  testing::ExpectReferenceRun(run->nodes, ref, 4);
}

// After an etcd outage the shard's old primary may hold its claim again
// (it rejoined and a call claimed it) while a client that failed over
// from it asks the backup: the backup answers "not primary", and the client
// asks the old primary too, which answers for the shard. Driven by the
// table: server 1 is fenced in a step, the client's probe of it fails, and
// it rejoins with its claim when the backup (server 2) is asked to claim.
TEST(FailoverRaceTest, AClientFindsTheShardOnTheServerItFailedOverFromOnceThatHoldsItAgain) {
  TableCluster c;
  ASSERT_EQ(c.servers.size(), 3u);
  std::atomic<int> asked{0};
  c.members[2]->OnClaim([&](int shard) {
    if (shard != 1) return;
    ++asked;
    c.members[1]->SetLeaseValid(true);
  });
  v1::JobSpec spec = testing::ReplicatedSpec("rejoined", 1);
  auto run = testing::StartNodes(spec, c.addresses);
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());
  testing::TrainSteps(run->nodes, ref, 0, 2);
  testing::TrainSteps(run->nodes, ref, 2, 4, [&] { c.members[1]->SetLeaseValid(false); });
  EXPECT_GE(asked.load(), 1) << "the backup was never asked for shard 1";
  auto term = c.members[0]->Primary("rejoined", 1);
  ASSERT_TRUE(term.ok()) << term.status();
  EXPECT_EQ(term->primary, c.addresses[1]) << "shard 1 moved";
  testing::ExpectReferenceRun(run->nodes, ref, 4);
  c.members[2]->OnClaim(nullptr);
}

}  // namespace
}  // namespace zerostate::server
