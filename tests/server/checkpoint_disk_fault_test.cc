// A disk that is full or failing while a real server writes a checkpoint:
// the checkpoint fails with an error naming the file, the previous
// checkpoint stays whole (it restores bit-identical), the failed one is
// never loaded, and the server checkpoints again once the disk is back.
//
// The faults are real system-call errors: the file the server creates is
// planted beforehand as a symlink to /dev/full (every write fails with
// ENOSPC) or to a directory (the create fails with EISDIR).
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "server/core/checkpoint/checkpoint_reader.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

struct DiskFault {
  const char* name;
  const char* file;    // the file of checkpoint v2 whose temporary is planted
  const char* target;  // what it points to ("" = the checkpoint root, a directory)
  absl::StatusCode code;
};

class CheckpointDiskFaultTest : public ::testing::TestWithParam<DiskFault> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/zs-ckpt-disk-XXXXXX";
    root_ = mkdtemp(tmpl);
    auto server = ServerProcess::Start(TestServerOptions());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto client = client::Client::Connect(TestClientOptions({server_->address()}));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto job = client_->RegisterJob(TestSpec("disk", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Step(uint64_t step) {
    std::vector<float> g = NodeGradient(job_->layout(), 0, step);
    ASSERT_TRUE(job_->Push(step, 0, {0, job_->layout().used_elems}, g.data(), v1::DTYPE_FP32).ok());
    ASSERT_TRUE(job_->Step(step, 0.01f, 1.0f, false).ok());
  }
  std::vector<float> Master(uint64_t version) {
    std::vector<float> w(job_->layout().total_elems);
    EXPECT_TRUE(job_->GatherMaster(version, {0, w.size()}, w.data()).ok());
    return w;
  }

  std::string root_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<client::JobClient> job_;
};

TEST_P(CheckpointDiskFaultTest, FailedCheckpointLeavesThePreviousOneWhole) {
  const DiskFault& fault = GetParam();
  Step(0);
  auto first = job_->Checkpoint(1, root_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<float> at_first = Master(1);
  Step(1);

  const std::string dir = root_ + "/disk/v2";
  const std::string planted = dir + "/" + fault.file + ".tmp";
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const std::string target = *fault.target == '\0' ? root_ : fault.target;
  ASSERT_EQ(symlink(target.c_str(), planted.c_str()), 0);
  auto second = job_->Checkpoint(2, root_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), fault.code) << second.status();
  EXPECT_NE(second.status().message().find(fault.file), std::string::npos) << second.status();

  // The failed checkpoint has no manifest: it is never taken for whole.
  EXPECT_FALSE(std::filesystem::exists(dir + "/shard-0-of-1.manifest.json"));
  auto broken = client_->RestoreJob(dir);
  EXPECT_FALSE(broken.ok());
  auto version = job_->Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 2u) << "a refused restore changed the job";

  // The previous one is whole: every block verifies and it restores exactly.
  auto reader = server::CheckpointReader::Open(*first);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto restored = client_->RestoreJob(*first);
  ASSERT_TRUE(restored.ok()) << restored.status();
  job_ = *std::move(restored);
  const std::vector<float> back = Master(1);
  ExpectBitIdentical(back.data(), at_first.data(), back.size(), "restored masters");

  // The disk is back: training and checkpoints go on.
  std::filesystem::remove(planted);
  Step(1);
  auto again = job_->Checkpoint(2, root_);
  EXPECT_TRUE(again.ok()) << again.status();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, CheckpointDiskFaultTest,
    ::testing::Values(
        DiskFault{"data_file_disk_full", "shard-0-of-1.state", "/dev/full",
                  absl::StatusCode::kResourceExhausted},
        DiskFault{"manifest_disk_full", "shard-0-of-1.manifest.json", "/dev/full",
                  absl::StatusCode::kResourceExhausted},
        DiskFault{"data_file_cannot_be_created", "shard-0-of-1.state", "",
                  absl::StatusCode::kInternal}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zerostate::testing
