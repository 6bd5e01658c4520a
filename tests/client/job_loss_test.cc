// JobClient::Loss and EndIfLost against 2 real server processes: a job
// every server holds is left as it is; one whose server restarted empty or
// went silent is named, and deleted on the server that answers, which ends
// a gather waiting there at once instead of after its rpc_timeouts; and a
// GradStats that a restarted server fails ends without waiting on the other.
#include "tests/client/cluster_fixture.h"

namespace zerostate::testing {
namespace {

using client::JobLoss;

// Far below the gather's rpc_timeout (20 s) x max_attempts: a bound for
// "the waiting gather ended", not a speed target.
constexpr absl::Duration kWoken = absl::Seconds(10);

class JobLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = ServerCluster::Start(2, TestServerOptions());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto client = client::Client::Connect(TestClientOptions(cluster_->addresses()));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Registers `id` and starts a gather of version 1 (never stepped) over
  // every server.
  void RegisterAndWait(const std::string& id) {
    auto job = client_->RegisterJob(TestSpec(id, 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
    weights_.assign(job_->layout().total_elems, 0.0f);
    gather_ = job_->GatherAsync(1, {0, job_->layout().total_elems}, weights_.data(),
                                v1::DTYPE_FP32);
  }

  std::unique_ptr<ServerCluster> cluster_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<client::JobClient> job_;
  std::vector<float> weights_;
  client::Ticket gather_;
};

TEST_F(JobLossTest, AJobEveryServerHoldsIsLeftAsItIs) {
  RegisterAndWait("held");
  auto loss = job_->EndIfLost(absl::Seconds(1));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(loss->cause, JobLoss::Cause::kNone);
  EXPECT_EQ(loss->account, "");
  EXPECT_TRUE(job_->Version().ok());
  EXPECT_FALSE(gather_.WaitFor(absl::Milliseconds(200)));  // still waiting for version 1
  ASSERT_TRUE(job_->Delete().ok());
  EXPECT_FALSE(gather_.Wait().ok());  // ended by the deletion
}

TEST_F(JobLossTest, ARestartedServerIsNamedAndTheJobEndedOnTheOther) {
  RegisterAndWait("restarted");
  const std::string victim = cluster_->server(1).address();
  ASSERT_TRUE(cluster_->server(1).Kill().ok());
  ASSERT_TRUE(cluster_->server(1).Restart().ok());
  auto loss = job_->EndIfLost(absl::Seconds(1));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(loss->cause, JobLoss::Cause::kShardLost);
  EXPECT_NE(loss->account.find("server " + victim), std::string::npos) << loss->account;
  ASSERT_TRUE(gather_.WaitFor(kWoken));
  EXPECT_FALSE(gather_.Wait().ok());
}

// The coordinator's GradStats after a server restarted: the restarted one
// answers at once that it has no job, and the survivor, which waits for
// gradients no rank will push (the ranks that failed on the restarted
// server are rolling back), is not waited out: the call ends with the lost
// shard's error, not the cancel of the other.
TEST_F(JobLossTest, GradStatsEndsOnALostShardWithoutWaitingOutTheOthers) {
  auto job = client_->RegisterJob(TestSpec("stats", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(cluster_->server(1).Kill().ok());
  ASSERT_TRUE(cluster_->server(1).Restart().ok());
  const absl::Time start = absl::Now();
  auto stats = (*job)->GradStats(0);  // nothing pushed: server 0 waits for the gradients
  EXPECT_LT(absl::Now() - start, kWoken);
  ASSERT_FALSE(stats.ok());
  EXPECT_FALSE(absl::IsCancelled(stats.status())) << stats.status();
  // The restarted server says it lost the job; or, on a loaded machine,
  // the client's channel to it is still in its reconnect backoff from the
  // kill (UNAVAILABLE, "connection refused", after the retries): either
  // way the call ended on server 1, not after server 0's wait.
  EXPECT_TRUE(absl::IsNotFound(stats.status()) || absl::IsUnauthenticated(stats.status()) ||
              absl::IsAborted(stats.status()) || absl::IsUnavailable(stats.status()))
      << stats.status();
}

TEST_F(JobLossTest, ASilentServerIsNamedAfterTheWaitAndTheJobEndedOnTheOther) {
  RegisterAndWait("silent");
  const std::string victim = cluster_->server(1).address();
  ASSERT_TRUE(cluster_->server(1).Kill().ok());
  // Loss alone changes nothing.
  auto seen = job_->Loss(absl::Milliseconds(300));
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->cause, JobLoss::Cause::kServerSilent);
  EXPECT_FALSE(gather_.WaitFor(absl::Milliseconds(200)));
  auto loss = job_->EndIfLost(absl::Seconds(1));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(loss->cause, JobLoss::Cause::kServerSilent);
  EXPECT_NE(loss->account.find("within the server wait (1s)"), std::string::npos) << loss->account;
  EXPECT_NE(loss->account.find(victim), std::string::npos) << loss->account;
  ASSERT_TRUE(gather_.WaitFor(kWoken));
  EXPECT_FALSE(gather_.Wait().ok());
}

}  // namespace
}  // namespace zerostate::testing
