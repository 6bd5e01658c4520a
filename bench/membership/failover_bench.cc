// failover_bench: how fast membership moves a primary, against a real etcd
// (tests/testing/etcd_process.h) on loopback, each figure against its limit:
//   membership.notice_after_stop   clean stop (lease revoked) to another
//                                  member's OnPrimaryLost; no limit
//   membership.notice_after_crash  a lease's last keepalive to another
//                                  member's OnPrimaryLost; limit: the TTL
//   membership.fence_lead          a partitioned primary's LeaseValid()
//                                  turning false, to another member's
//                                  OnPrimaryLost; limit: TTL/4, the margin
//                                  promised (ratio >= 1 is the guarantee)
//   membership.claim               one Claim round trip (p50); no limit
// Medians over --rounds. Needs /usr/bin/etcd.
//   failover_bench [--json] [--rounds=3] [--ttl_s=2]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/membership/etcd_membership.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/fault_proxy.h"

ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(int, rounds, 3, "rounds per figure (the median is printed)");
ABSL_FLAG(int, ttl_s, 2, "lease TTL in seconds (>= 2)");

namespace zerostate::bench {
namespace {

using server::EtcdClient;
using server::EtcdMembership;
using server::EtcdMembershipOptions;

void Print(const std::string& figure, double value, const std::string& unit, double limit) {
  if (absl::GetFlag(FLAGS_json)) {
    std::string lim = limit > 0 ? absl::StrCat(limit) : "null";
    std::string ratio = limit > 0 ? absl::StrCat(value / limit) : "null";
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%s,\"ratio\":%s}\n",
                figure.c_str(), value, unit.c_str(), lim.c_str(), ratio.c_str());
  } else {
    std::printf("%-32s %10.3f %s%s\n", figure.c_str(), value, unit.c_str(),
                limit > 0
                    ? absl::StrFormat("  (limit %.3f, ratio %.3f)", limit, value / limit).c_str()
                    : "");
  }
  std::fflush(stdout);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "failover_bench: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<EtcdMembership> Member(const std::string& self, const std::string& endpoint) {
  EtcdMembershipOptions o;
  o.endpoints = {endpoint};
  o.cluster = "bench";
  o.self = self;
  o.lease_ttl_seconds = absl::GetFlag(FLAGS_ttl_s);
  auto m = EtcdMembership::Start(o);
  if (!m.ok()) Fail(m.status().ToString());
  return *std::move(m);
}

// Seconds from `start` until b hears that (job, shard) lost its primary.
class Notice {
 public:
  explicit Notice(EtcdMembership& b) : b_(b) {
    b_.OnPrimaryLost([this](const std::string&, int) {
      at_ = absl::Now();
      if (!heard_.HasBeenNotified()) heard_.Notify();
    });
  }
  ~Notice() { b_.OnPrimaryLost(nullptr); }
  absl::Time Wait() {
    if (!heard_.WaitForNotificationWithTimeout(absl::Seconds(60))) Fail("no OnPrimaryLost");
    return at_;
  }

 private:
  EtcdMembership& b_;
  absl::Notification heard_;
  absl::Time at_;
};

int Run() {
  auto etcd = testing::EtcdProcess::Start();
  if (!etcd.ok()) Fail(etcd.status().ToString());
  const std::string endpoint = (*etcd)->endpoint();
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const double ttl = absl::GetFlag(FLAGS_ttl_s);
  auto b = Member("b:1", endpoint);
  auto raw = EtcdClient::Create({{endpoint}, absl::Seconds(5)});
  if (!raw.ok()) Fail(raw.status().ToString());

  std::vector<double> stop_ms, crash_s, lead_ms, claim_ms;
  for (int r = 0; r < rounds; ++r) {
    {  // a clean stop
      auto a = Member("a:1", endpoint);
      if (!a->Claim("stop", r).ok()) Fail("claim");
      Notice notice(*b);
      absl::Time t0 = absl::Now();
      a.reset();
      stop_ms.push_back(absl::ToDoubleMilliseconds(notice.Wait() - t0));
    }
    {  // a crash: a lease kept alive once, then never again
      auto lease = (*raw)->LeaseGrant(static_cast<int64_t>(ttl));
      if (!lease.ok()) Fail(lease.status().ToString());
      if (!(*raw)->Put(b->PrimaryKey("crash", r), "crashed:1", lease->id()).ok()) Fail("put");
      Notice notice(*b);
      absl::Time t0 = absl::Now();
      if (!(*raw)->KeepAliveOnce(lease->id(), absl::Seconds(5)).ok()) Fail("keepalive");
      crash_s.push_back(absl::ToDoubleSeconds(notice.Wait() - t0));
    }
    {  // a partition: the primary's fence against the other's notice
      auto proxy = testing::FaultProxy::Start(endpoint);
      if (!proxy.ok()) Fail(proxy.status().ToString());
      auto a = Member("a:1", (*proxy)->address());
      if (!a->Claim("cut", r).ok()) Fail("claim");
      Notice notice(*b);
      (*proxy)->SetBlackHole(true);
      while (a->LeaseValid()) absl::SleepFor(absl::Milliseconds(1));
      absl::Time fenced = absl::Now();
      lead_ms.push_back(absl::ToDoubleMilliseconds(notice.Wait() - fenced));
      (*proxy)->SetBlackHole(false);
    }
  }
  auto a = Member("a:1", endpoint);
  for (int i = 0; i < 200; ++i) {
    absl::Time t0 = absl::Now();
    if (!a->Claim("claims", i).ok()) Fail("claim");
    claim_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  Print("membership.notice_after_stop", Median(stop_ms), "ms", 0);
  Print("membership.notice_after_crash", Median(crash_s), "s", ttl);
  Print("membership.fence_lead", Median(lead_ms), "ms", ttl * 1000 / 4);
  Print("membership.claim", Median(claim_ms), "ms", 0);
  return 0;
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return zerostate::bench::Run();
}
