// Quotas against a real zerostate-server process: --max_jobs,
// --job_ram_quota_bytes and --job_disk_quota_bytes refuse RegisterJob and
// Restore with RESOURCE_EXHAUSTED naming the quota and the figures, before
// anything is allocated (RAM, job and disk gauges unchanged, no NVMe file).
#include <filesystem>
#include <sstream>
#include <string>

#include "tests/server/auth_fixture.h"

namespace zerostate::testing {
namespace {

constexpr int64_t kBigElems = 50000;  // 49 blocks: 802816 bytes of RAM, plus 3x its 45-byte spec

class QuotaTest : public AuthServerTest {
 protected:
  void SetUp() override {
    nvme_dir_ = ::testing::TempDir() + "quota_nvme_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(nvme_dir_);
    std::filesystem::create_directories(nvme_dir_);
    StartServer({"--max_jobs=2", "--job_ram_quota_bytes=100000", "--job_disk_quota_bytes=100000",
                 "--nvme_dir=" + nvme_dir_});
  }
  void TearDown() override { std::filesystem::remove_all(nvme_dir_); }

  // The metrics that say what the server holds: RAM, jobs, per-job series.
  std::string Holdings() {
    std::istringstream in(Metrics());
    std::string line, out;
    while (std::getline(in, line)) {
      if (line.rfind("zerostate_ram_used_bytes", 0) == 0 || line.rfind("zerostate_jobs ", 0) == 0 ||
          line.find("job_id=\"") != std::string::npos) {
        out += line + "\n";
      }
    }
    return out;
  }

  void ExpectExhausted(const grpc::Status& s, const std::string& needle) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
  }

  std::string nvme_dir_;
};

TEST_F(QuotaTest, RamQuotaRefusesABigJobBeforeAllocating) {
  ASSERT_TRUE(Register("small", kTokenA).ok());
  const std::string before = Holdings();
  ExpectExhausted(Register("big", kTokenA, nullptr, kBigElems),
                  "job_ram_quota_bytes: job 'big' needs 802951 bytes of RAM on this server, "
                  "over the per-job quota of 100000");
  EXPECT_EQ(Holdings(), before);
  EXPECT_NE(before.find("job_id=\"small\""), std::string::npos) << before;
  EXPECT_EQ(Status("big", kTokenA).error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << "no job 'big' was made";
}

TEST_F(QuotaTest, DiskQuotaRefusesAnNvmeJobBeforeCreatingItsFile) {
  const std::string before = Holdings();
  v1::RegisterJobRequest req = JobRequest("disk", server_->address());
  req.mutable_spec()->set_tier(v1::TIER_NVME);
  v1::RegisterJobResponse resp;
  ExpectExhausted(stub_->RegisterJob(Ctx(kTokenA).get(), req, &resp),
                  "job_disk_quota_bytes: job 'disk' needs 163840 bytes of disk on this server, "
                  "over the per-job quota of 100000");
  EXPECT_EQ(Holdings(), before);
  EXPECT_TRUE(std::filesystem::is_empty(nvme_dir_)) << "the refused job left a file";
}

TEST_F(QuotaTest, MaxJobsRefusesAThirdJobButNotAnAttach) {
  ASSERT_TRUE(Register("a", kTokenA).ok());
  ASSERT_TRUE(Register("b", kTokenB).ok());
  const std::string before = Holdings();
  ExpectExhausted(Register("c", kTokenA),
                  "max_jobs: job 'c' would be job 3 on this server, "
                  "which allows 2 (--max_jobs)");
  EXPECT_EQ(Holdings(), before);
  EXPECT_TRUE(Register("a", kTokenA).ok()) << "attaching to an existing job is no new job";
  v1::DeleteJobRequest del;
  del.set_job_id("b");
  v1::DeleteJobResponse deleted;
  ASSERT_TRUE(stub_->DeleteJob(Ctx(kTokenB).get(), del, &deleted).ok());
  EXPECT_TRUE(Register("c", kTokenA).ok());
}

TEST_F(QuotaTest, RestoreIsHeldToTheSameQuotas) {
  const std::string root = ::testing::TempDir() + "quota_restore";
  std::filesystem::remove_all(root);
  ASSERT_TRUE(Register("a", kTokenA).ok());
  v1::CheckpointRequest creq;
  creq.set_job_id("a");
  creq.set_root(root);
  v1::CheckpointResponse cresp;
  ASSERT_TRUE(stub_->Checkpoint(Ctx(kTokenA).get(), creq, &cresp).ok()) << "checkpoint";
  v1::RestoreRequest rreq;
  rreq.set_path(cresp.path());
  rreq.add_servers(server_->address());
  v1::RestoreResponse rresp;
  // Replacing the job itself is no new job.
  ASSERT_TRUE(stub_->Restore(Ctx(kTokenA).get(), rreq, &rresp).ok());
  // Gone, and two other jobs in its place: restoring it would be a third.
  v1::DeleteJobRequest del;
  del.set_job_id("a");
  v1::DeleteJobResponse deleted;
  ASSERT_TRUE(stub_->DeleteJob(Ctx(kTokenA).get(), del, &deleted).ok());
  ASSERT_TRUE(Register("b", kTokenB).ok());
  ASSERT_TRUE(Register("c", kTokenB).ok());
  const std::string before = Holdings();
  ExpectExhausted(stub_->Restore(Ctx(kTokenA).get(), rreq, &rresp),
                  "max_jobs: job 'a' would be job 3");
  EXPECT_EQ(Holdings(), before);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace zerostate::testing
