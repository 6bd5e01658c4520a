// EtcdMembership against a real etcd (tests/testing/etcd_process.h), over
// real gRPC on loopback; partitions through the fault proxy. Skipped when
// /usr/bin/etcd is missing. Leases of 4 s (etcd_fixture.h) keep each case
// to seconds. Every wait has a generous bound that only a failure reaches;
// the assertions are on the order of events, never on how long something
// took.
#include "server/membership/etcd_membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "tests/server/membership/etcd_fixture.h"
#include "tests/testing/fault_proxy.h"

namespace zerostate::server {
namespace {

using testing::FaultProxy;

constexpr absl::Duration kBound = absl::Seconds(30);  // reached only on failure

// Waits until `done()` holds, up to kBound; false if it never did.
template <typename F>
bool WaitUntil(F done) {
  const absl::Time deadline = absl::Now() + kBound;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

const char* YesNo(bool b) { return b ? "true" : "false"; }

// (job, shard) pairs reported by OnPrimaryLost, in order.
class LostLog {
 public:
  void Add(const std::string& job, int shard) {
    absl::MutexLock lock(&mu_);
    lost_.push_back(job + "/" + std::to_string(shard));
  }
  std::vector<std::string> Get() const {
    absl::MutexLock lock(&mu_);
    return lost_;
  }
  bool WaitFor(const std::string& what) const {
    absl::MutexLock lock(&mu_);
    auto has = [&] {
      mu_.AssertHeld();
      return std::find(lost_.begin(), lost_.end(), what) != lost_.end();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&has), kBound);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lost_ ABSL_GUARDED_BY(mu_);
};

class EtcdMembershipTest : public EtcdFixture {
 protected:
  EtcdMembershipTest() : EtcdFixture("test") {}
};

TEST_F(EtcdMembershipTest, ClaimIsExclusive) {
  auto a = Member("a:1");
  auto b = Member("b:1");
  ASSERT_TRUE(a && b);
  auto won = a->Claim("job", 0);
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_EQ(won->primary, "a:1");
  EXPECT_GT(won->epoch, 0);
  auto taken = b->Claim("job", 0);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->primary, "a:1");
  EXPECT_EQ(taken->epoch, won->epoch);
  auto again = a->Claim("job", 0);  // a holder's own claim, repeated
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch, won->epoch);
  auto seen = b->Primary("job", 0);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->primary, "a:1");
  EXPECT_EQ(seen->epoch, won->epoch);
  EXPECT_TRUE(a->Holds("job", 0, *won));
  EXPECT_FALSE(b->Holds("job", 0, *won));
  EXPECT_FALSE(a->Holds("job", 1, *won));
  EXPECT_TRUE(absl::IsNotFound(b->Primary("job", 1).status()));
}

TEST_F(EtcdMembershipTest, ReleaseRemovesOnlyItsOwnClaim) {
  LostLog lost;  // outlives b, whose thread calls into it
  auto a = Member("a:1");
  auto b = Member("b:1");
  ASSERT_TRUE(a && b);
  b->OnPrimaryLost([&](const std::string& job, int shard) { lost.Add(job, shard); });
  auto term = a->Claim("job", 0);
  ASSERT_TRUE(term.ok()) << term.status();
  ASSERT_TRUE(b->Release("job", 0).ok());  // not b's: nothing changes
  auto still = b->Primary("job", 0);
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->epoch, term->epoch);
  EXPECT_TRUE(a->Holds("job", 0, *term));
  ASSERT_TRUE(a->Release("job", 0).ok());
  EXPECT_FALSE(a->Holds("job", 0, *term));
  EXPECT_TRUE(absl::IsNotFound(b->Primary("job", 0).status()));
  EXPECT_TRUE(lost.WaitFor("job/0"));
  auto taken = b->Claim("job", 0);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->primary, "b:1");
  EXPECT_GT(taken->epoch, term->epoch);
  EXPECT_TRUE(a->Release("job", 7).ok());  // never held: OK
  b->OnPrimaryLost(nullptr);
}

// The behind/ records (SetBehind): only the claim in force writes them,
// every member reads them, they outlive the primary's lease, and a release
// of the claim (the job deleted) takes them away.
TEST_F(EtcdMembershipTest, OnlyThePrimaryRecordsACopyBehindAndTheRecordOutlivesIt) {
  auto a = Member("a:1");
  ASSERT_TRUE(a);
  auto term = a->Claim("job", 0);
  ASSERT_TRUE(term.ok()) << term.status();
  for (const char* copy : {"b:1", "c:1"})
    ASSERT_TRUE(a->SetBehind("job", 0, *term, copy, true).ok());
  ASSERT_TRUE(a->SetBehind("job", 0, *term, "c:1", false).ok());
  auto b = Member("b:1");
  ASSERT_TRUE(b);
  EXPECT_EQ(*b->Behind("job", 0), std::vector<std::string>{"b:1"});
  EXPECT_TRUE(b->Behind("job", 1)->empty());
  // A term not in force (another's epoch) writes nothing.
  absl::Status stale = b->SetBehind("job", 0, PrimaryTerm{"b:1", term->epoch + 1}, "a:1", true);
  EXPECT_TRUE(absl::IsFailedPrecondition(stale)) << stale;
  EXPECT_NE(stale.message().find("no longer in force"), std::string::npos) << stale;
  EXPECT_TRUE(absl::IsInvalidArgument(a->SetBehind("job", 0, *term, "x/y", true)));
  // The primary gone (its lease revoked), the record stays; the next
  // primary's release of its claim removes it.
  a->Leave();
  EXPECT_EQ(*b->Behind("job", 0), std::vector<std::string>{"b:1"});
  auto taken = b->Claim("job", 0);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->primary, "b:1");
  ASSERT_TRUE(b->Release("job", 0).ok());
  EXPECT_TRUE(b->Behind("job", 0)->empty());
}

TEST_F(EtcdMembershipTest, ConcurrentClaimsHaveOneWinnerEach) {
  std::vector<std::unique_ptr<EtcdMembership>> members;
  for (int i = 0; i < 4; ++i) members.push_back(Member("m:" + std::to_string(i)));
  for (auto& m : members) ASSERT_TRUE(m);
  constexpr int kShards = 8;
  std::vector<std::vector<PrimaryTerm>> terms(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int s = 0; s < kShards; ++s) {
        auto t = members[i]->Claim("job", s);
        EXPECT_TRUE(t.ok()) << t.status();
        terms[i].push_back(t.ok() ? *t : PrimaryTerm{});
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < kShards; ++s) {
    int holders = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      EXPECT_EQ(terms[i][s].primary, terms[0][s].primary) << "shard " << s;
      EXPECT_EQ(terms[i][s].epoch, terms[0][s].epoch) << "shard " << s;
      holders += members[i]->Holds("job", s, terms[i][s]) ? 1 : 0;
    }
    EXPECT_EQ(holders, 1) << "shard " << s;
  }
}

TEST_F(EtcdMembershipTest, EpochGrowsAcrossClaims) {
  LostLog lost;  // outlives b, whose thread calls into it
  auto b = Member("b:1");
  ASSERT_TRUE(b);
  b->OnPrimaryLost([&](const std::string& job, int shard) { lost.Add(job, shard); });
  int64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    auto a = Member("a:1");
    ASSERT_TRUE(a);
    auto t = a->Claim("job", 3);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->primary, "a:1");
    EXPECT_GT(t->epoch, last) << "round " << round;
    last = t->epoch;
    a.reset();  // stops cleanly: revokes its lease, its claims go at once
    ASSERT_TRUE(WaitUntil([&] { return lost.Get().size() == static_cast<size_t>(round + 1); }));
    EXPECT_EQ(lost.Get().back(), "job/3");
  }
  auto mine = b->Claim("job", 3);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->primary, "b:1");
  EXPECT_GT(mine->epoch, last);
}

// A member that stopped keeping its lease alive (a crash): etcd expires
// the lease, the claim goes, and another member hears of it and takes it.
TEST_F(EtcdMembershipTest, LeaseExpiryFreesThePrimaryAndTellsTheOthers) {
  auto raw = Client();
  LostLog lost;  // outlives b, whose thread calls into it
  auto b = Member("b:1");
  ASSERT_TRUE(b);
  b->OnPrimaryLost([&](const std::string& job, int shard) { lost.Add(job, shard); });
  auto lease = raw->LeaseGrant(2);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(raw->Put(b->PrimaryKey("job", 5), "crashed:1", lease->id()).ok());
  auto held = b->Claim("job", 5);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->primary, "crashed:1");
  ASSERT_TRUE(lost.WaitFor("job/5")) << "no OnPrimaryLost after the lease's TTL";
  auto taken = b->Claim("job", 5);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->primary, "b:1");
  EXPECT_GT(taken->epoch, held->epoch);
  EXPECT_TRUE(b->Holds("job", 5, *taken));
}

// The fencing invariant. Member a reaches etcd through a proxy that then
// black-holes; b reaches etcd directly. By the time b learns that a's claim
// is gone (the event that lets it claim), a has already stopped believing
// it is primary; and a never believes so again under its old claim.
TEST_F(EtcdMembershipTest, PartitionedPrimaryFencesItselfBeforeAnotherCanClaim) {
  absl::Mutex mu;                   // the state b's callback writes outlives b
  std::vector<std::string> events;  // in the order they happened
  absl::Notification b_claimed;
  PrimaryTerm b_term;
  auto proxy = FaultProxy::Start(etcd_->endpoint());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  auto a = Member("a:1", (*proxy)->address());
  auto b = Member("b:1");
  ASSERT_TRUE(a && b);
  auto a_term = a->Claim("job", 0);
  ASSERT_TRUE(a_term.ok()) << a_term.status();
  ASSERT_TRUE(a->Holds("job", 0, *a_term));
  b->OnPrimaryLost([&](const std::string& job, int shard) {
    {
      absl::MutexLock lock(&mu);
      events.push_back(absl::StrCat("b heard lost ", job, "/", shard,
                                    "; a valid=", YesNo(a->LeaseValid()),
                                    " a holds=", YesNo(a->Holds(job, shard, *a_term))));
    }
    auto t = b->Claim(job, shard);
    absl::MutexLock lock(&mu);
    events.push_back(absl::StrCat("b claim ", t.ok() ? t->primary : t.status().ToString(),
                                  "; a valid=", YesNo(a->LeaseValid()),
                                  " a holds=", YesNo(a->Holds(job, shard, *a_term))));
    if (t.ok()) b_term = *t;
    if (!b_claimed.HasBeenNotified()) b_claimed.Notify();
  });

  (*proxy)->SetBlackHole(true);
  ASSERT_TRUE(b_claimed.WaitForNotificationWithTimeout(kBound)) << "b never heard of the loss";
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0], "b heard lost job/0; a valid=false a holds=false");
    EXPECT_EQ(events[1], "b claim b:1; a valid=false a holds=false");
    EXPECT_GT(b_term.epoch, a_term->epoch);
  }
  auto refused = a->Claim("job", 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();

  // The network heals: a finds its lease expired, joins again on a new one,
  // and sees b as the primary; its old claim stays void.
  const int64_t old_lease = a->lease_id();
  (*proxy)->SetBlackHole(false);
  (*proxy)->CutAll();
  ASSERT_TRUE(WaitUntil([&] { return a->LeaseValid() && a->lease_id() != old_lease; }))
      << "a did not join again";
  EXPECT_FALSE(a->Holds("job", 0, *a_term));
  auto seen = a->Claim("job", 0);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->primary, "b:1");
  EXPECT_EQ(seen->epoch, b_term.epoch);
  EXPECT_TRUE(b->Holds("job", 0, b_term));
}

// etcd itself stops (SIGSTOP): every member fences itself, and after it
// resumes each claim is either still held, and held by its claimant, or
// gone; never held by a member that does not know it.
TEST_F(EtcdMembershipTest, FrozenEtcdFencesEveryMember) {
  auto a = Member("a:1");
  auto b = Member("b:1");
  ASSERT_TRUE(a && b);
  auto term = a->Claim("job", 2);
  ASSERT_TRUE(term.ok()) << term.status();
  ASSERT_TRUE(etcd_->Freeze().ok());
  bool fenced = WaitUntil([&] { return !a->LeaseValid() && !b->LeaseValid(); });
  bool a_held_while_frozen = a->Holds("job", 2, *term);
  auto refused = b->Claim("job", 2);
  ASSERT_TRUE(etcd_->Thaw().ok());
  ASSERT_TRUE(fenced) << "a lease stayed valid with etcd stopped";
  EXPECT_FALSE(a_held_while_frozen);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  ASSERT_TRUE(WaitUntil([&] { return a->LeaseValid() && b->LeaseValid(); }));
  auto now = b->Primary("job", 2);
  if (now.ok()) {
    EXPECT_EQ(now->epoch, term->epoch);
    EXPECT_TRUE(a->Holds("job", 2, *term));
  } else {
    EXPECT_TRUE(absl::IsNotFound(now.status())) << now.status();
    EXPECT_TRUE(WaitUntil([&] { return !a->Holds("job", 2, *term); }));
  }
}

// etcd drops a member's lease before the member learns it (an operator's
// `etcdctl lease revoke`, or an expiry its keepalive has not seen yet): a
// claim is refused as FAILED_PRECONDITION, not "no primary"; the member
// joins again on a new lease and its old claims stay void.
TEST_F(EtcdMembershipTest, ALeaseGoneBehindTheMembersBackIsRefusedThenReplaced) {
  auto a = Member("a:1");
  ASSERT_TRUE(a);
  auto term = a->Claim("job", 0);
  ASSERT_TRUE(term.ok()) << term.status();
  const int64_t old_lease = a->lease_id();
  auto raw = Client();
  ASSERT_TRUE(raw->LeaseRevoke(old_lease).ok());
  auto refused = a->Claim("job", 1);
  if (refused.ok()) {  // only if the keepalive thread had joined again meanwhile
    EXPECT_NE(a->lease_id(), old_lease);
  } else {
    EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  }
  ASSERT_TRUE(WaitUntil([&] { return a->lease_id() != old_lease && a->LeaseValid(); }));
  EXPECT_FALSE(a->Holds("job", 0, *term));
  auto again = a->Claim("job", 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->primary, "a:1");
  EXPECT_GT(again->epoch, term->epoch);
  EXPECT_TRUE(a->Holds("job", 0, *again));
  auto members = a->Members();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(*members, std::vector<std::string>{"a:1"});
}

TEST_F(EtcdMembershipTest, MembersAreTheLiveServers) {
  auto a = Member("a:1");
  auto b = Member("b:1");
  ASSERT_TRUE(a && b);
  auto both = a->Members();
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(*both, (std::vector<std::string>{"a:1", "b:1"}));
  b.reset();
  auto one = a->Members();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, (std::vector<std::string>{"a:1"}));
}

// A server killed and started again on its address: the new process
// revokes the old one's lease at once, so its claims do not wait a TTL.
TEST_F(EtcdMembershipTest, RestartRevokesThePreviousIncarnationsClaims) {
  auto raw = Client();
  LostLog lost;  // outlives b, whose thread calls into it
  auto b = Member("b:1");
  ASSERT_TRUE(b);
  b->OnPrimaryLost([&](const std::string& job, int shard) { lost.Add(job, shard); });
  auto old = raw->LeaseGrant(600);  // would outlive the test
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_TRUE(raw->Put(b->PrimaryKey("job", 0), "a:1", old->id()).ok());
  ASSERT_TRUE(raw->Put("/zerostate/test/members/a:1", "a:1", old->id()).ok());
  auto a = Member("a:1");
  ASSERT_TRUE(a);
  auto before = a->Primary("job", 0);  // not before a holds the address
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->primary, "a:1");
  EXPECT_FALSE(a->Holds("job", 0, *before));
  ASSERT_TRUE(a->ReplacePreviousIncarnation().ok());
  EXPECT_TRUE(absl::IsNotFound(a->Primary("job", 0).status()));
  EXPECT_TRUE(lost.WaitFor("job/0"));
  auto t = a->Claim("job", 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->primary, "a:1");
  EXPECT_TRUE(a->Holds("job", 0, *t));
}

// A replacement of server a:1 from another address: refused while a:1's
// process keeps its lease alive (its member key as it was); once the lease
// of a process nobody renews (dead, or hung) lapses, named a:1 (the old
// claims went with the lease), dialled at its own address, which every
// member resolves the name to while it lives.
TEST_F(EtcdMembershipTest, AReplacementWaitsForTheOldLeaseToLapseAndIsDialledAtItsOwn) {
  auto raw = Client();
  auto b = Member("b:1");
  ASSERT_TRUE(b);
  auto replacement = Options("a:1");
  replacement.dial = "c:7";
  {
    auto live = Member("a:1");
    ASSERT_TRUE(live);
    const int64_t lease = live->lease_id();
    auto refused = EtcdMembership::Start(replacement);
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
    EXPECT_NE(refused.status().message().find(absl::StrCat(
                  "replace: a:1 is alive: its lease ", lease, " is kept alive by the process at "
                                                              "a:1; stop it first")),
              std::string::npos)
        << refused.status();
    auto member = raw->Range(live->MemberKey());
    ASSERT_TRUE(member.ok() && member->kvs_size() == 1) << member.status();
    EXPECT_EQ(member->kvs(0).value(), "a:1");
    EXPECT_EQ(member->kvs(0).lease(), lease);
    EXPECT_TRUE(live->LeaseValid());
  }  // left: the name is free again
  auto old = raw->LeaseGrant(2);  // a dead process's: nobody renews it
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_TRUE(raw->Put(b->PrimaryKey("job", 0), "a:1", old->id()).ok());
  ASSERT_TRUE(raw->Put("/zerostate/test/members/a:1", "a:1", old->id()).ok());
  auto same = b->Resolve("a:1");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, "a:1");
  auto started = EtcdMembership::Start(replacement);
  ASSERT_TRUE(started.ok()) << started.status();
  auto a = *std::move(started);
  auto left = raw->LeaseTimeToLive(old->id());
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, -1) << "joined before the old lease lapsed";
  ASSERT_TRUE(a->ReplacePreviousIncarnation().ok());
  EXPECT_TRUE(absl::IsNotFound(a->Primary("job", 0).status()));
  auto moved = b->Resolve("a:1");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, "c:7");
  auto members = b->Members();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(*members, (std::vector<std::string>{"a:1", "b:1"}));  // by name
  auto t = a->Claim("job", 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->primary, "a:1");
  auto unknown = b->Resolve("z:9");  // no live process: its name
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(*unknown, "z:9");
  EXPECT_TRUE(absl::IsInvalidArgument(b->Resolve("a/1").status()));
  a->Leave();
  auto gone = b->Resolve("a:1");
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, "a:1");
}

// A member whose lease was lost (hung, or cut off from etcd) finds, when it
// joins again, its name held by another process (a replacement at c:7): it
// is fenced for good, says so once, claims nothing, and leaves the
// replacement's member key alone.
TEST_F(EtcdMembershipTest, AMemberWhoseNameWasTakenWhileItsLeaseWasLostIsFencedForGood) {
  auto raw = Client();
  absl::Mutex mu;  // what a's callback writes outlives a
  std::vector<std::string> fenced;
  auto o = Options("a:1");
  o.on_fenced = [&](const std::string& why) {
    absl::MutexLock lock(&mu);
    fenced.push_back(why);
  };
  auto started = EtcdMembership::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  auto a = *std::move(started);
  auto term = a->Claim("job", 0);
  ASSERT_TRUE(term.ok()) << term.status();
  const int64_t old_lease = a->lease_id();
  ASSERT_TRUE(raw->LeaseRevoke(old_lease).ok());  // lapsed while a was away
  auto taker = raw->LeaseGrant(600);
  ASSERT_TRUE(taker.ok()) << taker.status();
  ASSERT_TRUE(raw->Put(a->MemberKey(), "c:7", taker->id()).ok());
  ASSERT_TRUE(WaitUntil([&] {
    absl::MutexLock lock(&mu);
    return !fenced.empty();
  })) << "a never noticed its name was taken";
  const std::string why = a->fenced();
  EXPECT_NE(why.find("this server's name a:1 is held by the process at c:7 (lease " +
                     std::to_string(taker->id()) + ")"),
            std::string::npos)
      << why;
  EXPECT_FALSE(a->LeaseValid());
  EXPECT_FALSE(a->Holds("job", 0, *term));
  auto refused = a->Claim("job", 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("held by the process at c:7"), std::string::npos)
      << refused.status();
  EXPECT_EQ(a->lease_id(), old_lease);  // it never joins again
  a->Leave();
  auto member = raw->Range(a->MemberKey());
  ASSERT_TRUE(member.ok() && member->kvs_size() == 1) << member.status();
  EXPECT_EQ(member->kvs(0).value(), "c:7");
  EXPECT_EQ(member->kvs(0).lease(), taker->id());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(fenced.size(), 1u);
  ASSERT_TRUE(raw->LeaseRevoke(taker->id()).ok());
}

TEST_F(EtcdMembershipTest, BadInputIsRefusedNamingIt) {
  auto unreachable = EtcdMembership::Start(Options("a:1", "127.0.0.1:1"));
  ASSERT_FALSE(unreachable.ok());
  EXPECT_TRUE(absl::IsUnavailable(unreachable.status())) << unreachable.status();
  EXPECT_NE(unreachable.status().message().find("etcd at 127.0.0.1:1: Range"),
            std::string::npos)
      << unreachable.status();
  auto bad = [&](EtcdMembershipOptions o, const std::string& names) {
    auto m = EtcdMembership::Start(std::move(o));
    ASSERT_FALSE(m.ok()) << names;
    EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
    EXPECT_NE(m.status().message().find(names), std::string::npos) << m.status();
  };
  bad(Options("a:1", "nonsense"), "etcd_endpoints: 'nonsense'");
  bad(Options("a:1", "https://127.0.0.1:2379"), "TLS");
  bad(Options("a:1", "127.0.0.1:99999"), "etcd_endpoints");
  auto o = Options("a:1");
  o.endpoints.clear();
  bad(o, "etcd_endpoints: no endpoint");
  o = Options("a:1");
  o.cluster = "a/b";
  bad(o, "cluster: 'a/b'");
  o = Options("a/1");
  bad(o, "advertised address 'a/1'");
  o = Options("a:1");
  o.dial = "c/7";
  bad(o, "dialled address 'c/7' of a:1");
  o = Options("a:1");
  o.lease_ttl_seconds = 1;
  bad(o, "etcd_lease_ttl_seconds: 1");
  o = Options("a:1");
  o.replace_wait_seconds = -2;
  bad(o, "replace_wait_seconds: -2");
  // A replacement of a name etcd never had a member of: refused, and etcd
  // as it was.
  o = Options("never:1");
  o.dial = "c:7";
  bad(o, "replace: 'never:1' was never a member of cluster 'test'");
  auto raw = Client();
  for (const char* key : {"/zerostate/test/members/never:1", "/zerostate/test/names/never:1"}) {
    auto got = raw->Range(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->kvs_size(), 0) << key;
  }

  // A dead endpoint before a live one: the live one serves.
  auto two = EtcdMembership::Start([&] {
    auto o2 = Options("a:1");
    o2.endpoints = {"127.0.0.1:1", etcd_->endpoint()};
    return o2;
  }());
  ASSERT_TRUE(two.ok()) << two.status();
  auto m = *std::move(two);
  EXPECT_TRUE(absl::IsInvalidArgument(m->Claim("bad job/", 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m->Claim("job", -1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m->Primary("", 0).status()));
  auto keys = raw->Range("/zerostate/test/primaries/", PrefixEnd("/zerostate/test/primaries/"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->kvs_size(), 0) << "a refused claim left a key";
}

TEST_F(EtcdMembershipTest, MetricsCountClaimsAndLosses) {
  const absl::Time started = absl::Now();
  auto registry = std::make_shared<prometheus::Registry>();
  LostLog lost;  // outlives b, whose thread calls into it
  auto o = Options("b:1");
  o.metrics = registry;
  auto b = EtcdMembership::Start(o);
  ASSERT_TRUE(b.ok()) << b.status();
  auto a = Member("a:1");
  ASSERT_TRUE(a);
  (*b)->OnPrimaryLost([&](const std::string& job, int shard) { lost.Add(job, shard); });
  ASSERT_TRUE(a->Claim("job", 0).ok());
  ASSERT_TRUE((*b)->Claim("job", 0).ok());  // taken
  ASSERT_TRUE((*b)->Claim("job", 1).ok());  // won
  a.reset();
  ASSERT_TRUE(lost.WaitFor("job/0"));
  std::string page = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(page.find("zerostate_membership_lease_valid 1"), std::string::npos) << page;
  EXPECT_NE(page.find("zerostate_membership_claims_total{result=\"won\"} 1"), std::string::npos)
      << page;
  EXPECT_NE(page.find("zerostate_membership_claims_total{result=\"taken\"} 1"), std::string::npos)
      << page;
  EXPECT_NE(page.find("zerostate_membership_primaries_lost_total 1"), std::string::npos) << page;
  constexpr char kConfirmed[] = "\nzerostate_membership_lease_confirmed_timestamp_seconds ";
  const size_t at = page.find(kConfirmed);
  ASSERT_NE(at, std::string::npos) << page;
  double confirmed = 0;
  const size_t from = at + sizeof(kConfirmed) - 1;
  ASSERT_TRUE(absl::SimpleAtod(page.substr(from, page.find('\n', from) - from), &confirmed))
      << page;
  EXPECT_LE(confirmed, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())) << page;
  EXPECT_GT(confirmed, absl::ToDoubleSeconds(started - absl::UnixEpoch())) << page;
}

}  // namespace
}  // namespace zerostate::server
