// The job registry's lock is not held across a job's creation: against a
// real server process, an NVMe job whose creation is held at its first
// write (--test_nvme_write_hold, a FaultEnv delay released by the test)
// does not stall another job, which registers, pushes, steps and gathers
// meanwhile. The order is proved by events, not by time: the server opens
// the hold's FIFO from inside the NVMe job's creation, the other job's
// calls all return while the NVMe registration has not, and only then does
// the test release the hold.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

TEST(RegistryStallTest, HeldNvmeCreationDoesNotStallAnotherJobsPushes) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "registry_stall.", getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directories(dir + "/nvme"));
  const std::string fifo = dir + "/hold";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << strerror(errno);
  ServerProcessOptions o = TestServerOptions();
  o.args.push_back("--nvme_dir=" + dir + "/nvme");
  o.args.push_back("--test_nvme_write_hold=" + fifo);
  auto server = ServerProcess::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();

  auto slow_client = client::Client::Connect(TestClientOptions({(*server)->address()}));
  ASSERT_TRUE(slow_client.ok()) << slow_client.status();
  v1::JobSpec nvme_spec = TestSpec("on-nvme", 1, v1::DTYPE_FP32, v1::DTYPE_FP32);
  nvme_spec.set_tier(v1::TIER_NVME);
  absl::StatusOr<std::unique_ptr<client::JobClient>> slow_job;
  absl::Notification slow_registered;
  std::thread registering([&] {
    slow_job = (*slow_client)->RegisterJob(nvme_spec);
    slow_registered.Notify();
  });

  // Returns once the server, inside the NVMe job's creation, opened the
  // FIFO to wait for its byte (the test's timeout is the backstop).
  int hold = open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  // Lets the creation go on, once (also when an assertion below fails).
  auto release = [&] {
    if (hold < 0) return;
    EXPECT_EQ(write(hold, "x", 1), 1) << strerror(errno);
    close(hold);
    hold = -1;
  };
  absl::Cleanup finish = [&] {
    release();
    registering.join();
  };
  ASSERT_GE(hold, 0) << strerror(errno);

  // Another job, on another client, meanwhile: every call of a step.
  auto client = client::Client::Connect(TestClientOptions({(*server)->address()}));
  ASSERT_TRUE(client.ok()) << client.status();
  auto job = (*client)->RegisterJob(TestSpec("in-ram", 1, v1::DTYPE_FP32, v1::DTYPE_FP32));
  ASSERT_TRUE(job.ok()) << job.status();
  const Layout& layout = (*job)->layout();
  const Range all{0, layout.used_elems};
  std::vector<float> grad = NodeGradient(layout, 0, 0);
  absl::Status pushed = (*job)->Push(0, 0, all, grad.data(), v1::DTYPE_FP32);
  EXPECT_TRUE(pushed.ok()) << pushed;
  absl::Status stepped = (*job)->Step(0, 0.01f, 1.0f, false);
  EXPECT_TRUE(stepped.ok()) << stepped;
  std::vector<float> w(layout.total_elems);
  absl::Status gathered = (*job)->GatherMaster(1, {0, w.size()}, w.data());
  EXPECT_TRUE(gathered.ok()) << gathered;
  // All of that while the NVMe job's creation was still held.
  EXPECT_FALSE(slow_registered.HasBeenNotified());

  release();
  std::move(finish).Invoke();
  ASSERT_TRUE(slow_job.ok()) << slow_job.status();
  // The held job is whole once let go.
  std::vector<float> nvme_grad = NodeGradient((*slow_job)->layout(), 0, 0);
  absl::Status nvme_pushed = (*slow_job)->Push(0, 0, all, nvme_grad.data(), v1::DTYPE_FP32);
  EXPECT_TRUE(nvme_pushed.ok()) << nvme_pushed;
  absl::Status nvme_stepped = (*slow_job)->Step(0, 0.01f, 1.0f, false);
  EXPECT_TRUE(nvme_stepped.ok()) << nvme_stepped;
  std::vector<float> nvme_w(layout.total_elems);
  absl::Status nvme_gathered = (*slow_job)->GatherMaster(1, {0, nvme_w.size()}, nvme_w.data());
  EXPECT_TRUE(nvme_gathered.ok()) << nvme_gathered;
  // The same job on either tier steps to the same weights.
  ExpectBitIdentical(nvme_w.data(), w.data(), w.size(), "NVMe job's weights");
  EXPECT_TRUE((*server)->Stop().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zerostate::testing
