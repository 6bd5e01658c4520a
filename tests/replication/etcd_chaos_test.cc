// The chaos loop of replicated shards: three servers in a real
// etcd, each dialing it through its own FaultProxy, a job of two nodes
// with one backup per shard (and, in a second test, two: every shard on
// every server, so that the backups that are not the new primary meet a
// deposed primary's messages), trained step by step for a bounded time while
// a seeded random schedule SIGKILLs servers (between steps, after node 0's
// pushes, or at a random moment of a step) and partitions them from etcd
// (0.5-7 s: from a blip the lease outlives to a cut past its expiry), then
// restarts or heals them. At most one server is away at a time, and the
// next fault waits until the repaired one is back: every server has had a
// keepalive answered since the repair and holds a valid lease, and none has
// a block under-replicated or a catch-up backlog (their metrics), after at
// least kCatchUpSteps steps. k = 1 tolerates one lost copy of each shard,
// not a second fault while the first one's copies are still catching up
// (a healed server's etcd channel can take seconds to reconnect, and its
// lease can expire after the heal). At the end:
//   - the version is the number of steps run (every step applied, none
//     rolled back: no checkpoint is ever taken or restored),
//   - both nodes' masters are bit-identical to the reference run's,
//   - each shard's copies are bit-identical, and every block of each
//     counts as many applied steps as the version (none applied twice).
// ZEROSTATE_CHAOS_SECONDS sets the time of the loop (default 20 with one
// backup, 10 with two: CI runs both on 2 cores),
// ZEROSTATE_CHAOS_SEED its schedule (default: the clock; printed, and
// named in every failure, so a failing schedule can be run again). The
// suite's ctest entries set one fixed seed (tests/replication/CMakeLists.txt);
// `make chaos` draws it from the clock.
#include <cstdlib>
#include <iostream>
#include <random>

#include "common/shard_map.h"
#include "tests/replication/etcd_cluster_fixture.h"
#include "tests/testing/fault_proxy.h"

namespace zerostate::server {
namespace {

constexpr int kDefaultSeconds = 20;
constexpr int kDefaultSecondsTwoBackups = 10;
// Steps a repaired server gets before the next fault: one in which its
// copies are found lost (a healed partition's copy is deposed), one that
// starts their catch-ups (in the background), one they rejoin.
constexpr int kCatchUpSteps = 3;
// A repaired server not back within this is a failure of the test.
constexpr absl::Duration kSettleTime = absl::Seconds(30);

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

enum class When { kBetweenSteps, kAfterPush, kAnyMoment };

class EtcdChaosTest : public EtcdClusterFixture {
 protected:
  EtcdChaosTest() : EtcdClusterFixture("chaos") {}

  // "" when every server reached etcd after `since` and holds a valid
  // lease, and every copy is live (no block under-replicated, no catch-up
  // backlog); otherwise what is not.
  std::string Unsettled(absl::Time since) {
    for (int i = 0; i < kEtcdServers; ++i) {
      auto page = testing::ScrapeMetrics(server(i).metrics_address(), absl::Seconds(5));
      if (!page.ok()) return absl::StrCat("server ", i, ": ", page.status().ToString());
      const double confirmed =
          testing::MetricValue(*page, "zerostate_membership_lease_confirmed_timestamp_seconds");
      if (confirmed < absl::ToDoubleSeconds(since - absl::UnixEpoch())) {
        return absl::StrCat("server ", i, ": no keepalive answered since the repair");
      }
      for (const auto& [name, want] : {std::pair{"zerostate_membership_lease_valid", 1.0},
                                       {"zerostate_under_replicated_blocks", 0.0},
                                       {"zerostate_catchup_backlog_bytes", 0.0}}) {
        const double v = testing::MetricValue(*page, name);
        if (v != want) return absl::StrCat("server ", i, ": ", name, " is ", v);
      }
    }
    return "";
  }

  // The loop, with job `job` of `replicas` backups per shard, for
  // ZEROSTATE_CHAOS_SECONDS (default `default_seconds`), then the checks.
  void Chaos(const std::string& job, uint32_t replicas, int default_seconds);
};

void EtcdChaosTest::Chaos(const std::string& job, uint32_t replicas, int default_seconds) {
  const uint64_t seed =
      EnvOr("ZEROSTATE_CHAOS_SEED", static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())));
  const absl::Duration budget =
      absl::Seconds(static_cast<int64_t>(EnvOr("ZEROSTATE_CHAOS_SECONDS", default_seconds)));
  std::cout << "chaos: ZEROSTATE_CHAOS_SEED=" << seed << " for " << budget << std::endl;
  RecordProperty("chaos_seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<testing::FaultProxy>> proxies;
  std::vector<std::string> endpoints;
  for (int i = 0; i < kEtcdServers; ++i) {
    auto proxy = testing::FaultProxy::Start(etcd_->endpoint());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    endpoints.push_back((*proxy)->address());
    proxies.push_back(*std::move(proxy));
  }
  StartServers({"--metrics_listen=127.0.0.1:0"}, endpoints);
  if (HasFatalFailure()) return;
  v1::JobSpec spec = testing::ReplicatedSpec(job, replicas);
  auto run = testing::StartNodes(spec, addresses());
  ASSERT_TRUE(run.ok()) << run.status();
  testing::ReferenceModel ref(run->nodes[0]->spec());

  std::string faults;  // the schedule so far, for failure messages
  int away = -1;        // the server killed or partitioned now
  bool partitioned = false;
  int steps_away = 0;   // steps a killed server stays away
  absl::Time heal_at;   // when a partitioned one is healed (between steps)
  int catching_up = 0;  // steps before the next fault
  bool settled = true;  // the last repaired server is back (Unsettled() was "")
  absl::Time repaired, settle_by;
  uint64_t step = 0;
  auto repair = [&] {
    if (partitioned) {
      proxies[away]->SetBlackHole(false);
      proxies[away]->CutAll();
    } else {
      // As a supervisor would: a server that cannot reach etcd at start
      // exits 1 (a loaded machine can stall etcd past its start-up wait).
      absl::Status restarted;
      for (int attempt = 0; attempt < 3; ++attempt) {
        restarted = server(away).Restart();
        if (restarted.ok()) break;
        std::cout << "chaos: restarting server " << away << ": " << restarted << std::endl;
      }
      ASSERT_TRUE(restarted.ok()) << "restarting server " << away << ": " << restarted;
    }
    absl::StrAppend(&faults, "step ", step, ": server ", away,
                    partitioned ? " healed\n" : " restarted\n");
    away = -1;
    catching_up = kCatchUpSteps;
    settled = false;
    repaired = absl::Now();
    settle_by = repaired + kSettleTime;
  };
  // Whether the cluster is back from the last repair; a failure once
  // kSettleTime has passed without it.
  auto back = [&] {
    if (settled) return true;
    const std::string unsettled = Unsettled(repaired);
    settled = unsettled.empty();
    EXPECT_TRUE(settled || absl::Now() < settle_by)
        << "not back " << kSettleTime << " after the last repair: " << unsettled;
    return settled;
  };
  const absl::Time end = absl::Now() + budget;
  while (absl::Now() < end) {
    SCOPED_TRACE(absl::StrCat("ZEROSTATE_CHAOS_SEED=", seed, ", faults:\n", faults));
    std::function<void()> fault;
    When when = When::kBetweenSteps;
    if (away < 0 && catching_up == 0 && back() && rng() % 2 == 0) {
      away = static_cast<int>(rng() % kEtcdServers);
      partitioned = rng() % 2 == 0;
      when = static_cast<When>(rng() % 3);
      steps_away = 1 + static_cast<int>(rng() % 3);
      // From a blip its lease outlives to a cut that outlasts it (a 4 s TTL:
      // fenced after about 3 s, expired after 4-4.5 s).
      const absl::Duration cut = absl::Milliseconds(500 + static_cast<int64_t>(rng() % 6500));
      heal_at = absl::Now() + cut;
      const int victim = away;
      testing::FaultProxy& proxy = *proxies[victim];
      fault = partitioned ? std::function<void()>([&proxy] { proxy.SetBlackHole(true); })
                          : std::function<void()>([this, victim] {
                              EXPECT_TRUE(server(victim).Kill().ok()) << "killing " << victim;
                            });
      const char* at[] = {"between steps", "after node 0's push", "at a random moment"};
      absl::StrAppend(&faults, "step ", step, ": server ", victim,
                      partitioned ? " partitioned from etcd " : " SIGKILLed ",
                      at[static_cast<int>(when)], " for ",
                      partitioned ? absl::FormatDuration(cut) : absl::StrCat(steps_away, " steps"),
                      "\n");
    } else if (away >= 0 && (partitioned ? absl::Now() >= heal_at : steps_away == 0)) {
      repair();
      if (HasFatalFailure()) return;
    }
    std::thread at_random;
    if (fault && when == When::kBetweenSteps) fault();
    if (fault && when == When::kAnyMoment) {
      const auto delay = absl::Milliseconds(static_cast<int64_t>(rng() % 100));
      at_random = std::thread([fault, delay] {
        absl::SleepFor(delay);
        fault();
      });
    }
    Train(*run, ref, step, step + 1, when == When::kAfterPush ? fault : nullptr);
    if (at_random.joinable()) at_random.join();
    if (HasFatalFailure()) return;
    ++step;
    if (HasFailure()) return;
    if (away >= 0) {
      --steps_away;
    } else if (catching_up > 0) {
      --catching_up;
    }
  }
  SCOPED_TRACE(absl::StrCat("ZEROSTATE_CHAOS_SEED=", seed, ", faults:\n", faults));
  if (away >= 0) repair();
  for (; catching_up > 0 || !back(); --catching_up) {  // every copy caught up
    Train(*run, ref, step, step + 1);
    ++step;
    if (HasFailure()) return;
  }
  std::cout << "chaos: " << step << " steps, faults:\n" << faults << std::flush;

  testing::ExpectReferenceRun(run->nodes, ref, step);
  for (uint32_t shard = 0; shard < kEtcdServers; ++shard) {
    const std::vector<uint32_t> copies = ReplicaServers(kEtcdServers, shard, replicas);
    ASSERT_EQ(copies.size(), replicas + 1);
    for (size_t c = 1; c < copies.size(); ++c) {
      testing::ExpectSameCopies(addresses()[copies[0]], addresses()[copies[c]], spec.job_id(),
                                shard, step);
    }
    auto copy = testing::ReadCopy(addresses()[copies[0]], spec.job_id(), shard, step);
    ASSERT_TRUE(copy.ok()) << copy.status();
    for (size_t b = 0; b < copy->versions.size(); ++b) {
      EXPECT_EQ(copy->versions[b], step) << "shard " << shard << " block " << b;
      EXPECT_EQ(copy->applied_steps[b], step) << "shard " << shard << " block " << b;
    }
  }
}

TEST_F(EtcdChaosTest, RandomKillsAndPartitionsLeaveEveryStepAppliedOnceAndTheWeightsBitIdentical) {
  Chaos("chaos", 1, kDefaultSeconds);
}

// k = 2 on three servers: a new primary's other backup is the third
// server, which refuses a deposed primary's messages once it has accepted
// the new primary's term (server/replication/accepted_terms.h). Still one
// server away at a time (the loop's rule), so two copies of each shard
// are always up.
TEST_F(EtcdChaosTest, WithTwoBackupsRandomKillsAndPartitionsLeaveTheCopiesBitIdentical) {
  Chaos("chaos2", 2, kDefaultSecondsTwoBackups);
}

}  // namespace
}  // namespace zerostate::server
