// Rendezvous keys of tokens that hold no job, against a real server process:
// workers that meet before rank 0 registered their job
// share one pool of such keys with anyone who makes up a token. An attacker
// with many tokens, each within its own quota, fills that pool with waiting
// calls; a run's start rendezvous must still complete, through the real
// client, and the pool must stay within its bound meanwhile.
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "tests/server/auth_fixture.h"

namespace zerostate::testing {
namespace {

constexpr int kPoolKeys = 8;
constexpr char kRunToken[] = "token-run-0123456789abcdef0123456789abcdef";
const std::string kJoblessKeys = "zerostate_rendezvous_keys{holder=\"jobless\"}";
const std::string kJoblessBytes = "zerostate_rendezvous_bytes{holder=\"jobless\"}";

using RendezvousAttackTest = AuthServerTest;

// Attacker threads: each makes waiting one-rank calls, each with a token
// never used before, one after the other, until Stop.
class Attack {
 public:
  Attack(v1::StateService::Stub* stub, int threads) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, stub, t] { Run(stub, t); });
  }
  ~Attack() { Stop(); }

  void Stop() {
    stop_ = true;
    {
      absl::MutexLock lock(&mu_);
      for (grpc::ClientContext* ctx : live_) ctx->TryCancel();
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  int calls() const { return calls_; }
  int dropped() const { return dropped_; }

 private:
  void Run(v1::StateService::Stub* stub, int t) {
    for (int i = 0; !stop_; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      ctx.AddMetadata("zerostate-job-token",
                      absl::StrCat("attacker-", t, "-", i, "-0123456789abcdef0123456789abcdef"));
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return;
        live_.push_back(&ctx);
      }
      v1::RendezvousRequest req;
      req.set_job_id("attack");
      req.set_key("k");
      req.set_rank(0);
      req.set_world(2);
      v1::RendezvousResponse resp;
      grpc::Status s = stub->Rendezvous(&ctx, req, &resp);
      {
        absl::MutexLock lock(&mu_);
        live_.erase(std::find(live_.begin(), live_.end(), &ctx));
      }
      ++calls_;
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
          s.error_message().find("dropped") != std::string::npos) {
        ++dropped_;
      }
      // A refused call returns at once: do not spin.
      if (!s.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> calls_{0};
  std::atomic<int> dropped_{0};
  absl::Mutex mu_;
  std::vector<grpc::ClientContext*> live_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// Before: the 9th jobless key was refused with RESOURCE_EXHAUSTED while 8
// waited, so ranks 1 and 2 of the run failed at once. Now the pool drops
// the cheapest key (the fewest ranks, oldest first) and a dropped call's
// client retries; rank 0's key, registered, is never dropped.
TEST_F(RendezvousAttackTest, ManyTokensFillingTheJoblessPoolCannotFailARunsStartRendezvous) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--jobless_rendezvous_keys_per_token=2",
                                       absl::StrCat("--jobless_rendezvous_keys=", kPoolKeys)}));
  Attack attack(stub_.get(), 2 * kPoolKeys);
  // The pool is full of waiting attacker keys.
  while (MetricValue(Metrics(), kJoblessKeys) < kPoolKeys) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  client::ClientOptions options;
  options.servers = {server_->address()};
  options.plaintext = true;
  options.job_token = kRunToken;
  options.rpc_timeout = std::chrono::seconds(20);
  // As the worker does (--server_wait_seconds): UNAVAILABLE is retried.
  options.unavailable_wait = std::chrono::seconds(60);
  auto meet = [](client::ClientOptions o, uint32_t rank) -> absl::StatusOr<std::vector<std::string>> {
    auto c = client::Client::Connect(o);
    if (!c.ok()) return c.status();
    return (*c)->Rendezvous("run", "registered", rank, 3, absl::StrCat("v", rank));
  };
  // Ranks 1 and 2 meet before rank 0 has registered the job.
  absl::StatusOr<std::vector<std::string>> got1, got2;
  std::thread rank1([&] { got1 = meet(options, 1); });
  std::thread rank2([&] { got2 = meet(options, 2); });
  // The pool stays within its bound however many tokens come.
  for (int i = 0; i < 10; ++i) {
    std::string page = Metrics();
    EXPECT_LE(MetricValue(page, kJoblessKeys), kPoolKeys);
    EXPECT_LE(MetricValue(page, kJoblessBytes), 64 << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(Register("run", kRunToken).ok());
  // One attempt: if ranks 1 and 2 failed, it fails at its deadline.
  client::ClientOptions rank0 = options;
  rank0.max_attempts = 1;
  auto got0 = meet(rank0, 0);
  rank1.join();
  rank2.join();
  const std::vector<std::string> all = {"v0", "v1", "v2"};
  ASSERT_TRUE(got1.ok()) << got1.status();
  ASSERT_TRUE(got2.ok()) << got2.status();
  ASSERT_TRUE(got0.ok()) << got0.status();
  EXPECT_EQ(*got0, all);
  EXPECT_EQ(*got1, all);
  EXPECT_EQ(*got2, all);
  // The attack went on throughout: keys were dropped to make room.
  EXPECT_GT(attack.dropped(), 0) << attack.calls() << " attacker calls";
  std::string page = Metrics();
  EXPECT_LE(MetricValue(page, kJoblessKeys), kPoolKeys);
  attack.Stop();
}

}  // namespace
}  // namespace zerostate::testing
