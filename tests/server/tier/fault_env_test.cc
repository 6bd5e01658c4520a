// The io_uring Env and the fault-injecting wrapper: real reads and writes
// round-trip, and every injected fault becomes the documented status with
// a message naming the file, the offset and the errno text.
#include "server/core/io/fault_env.h"

#include <gtest/gtest.h>

#include <cstring>

#include "server/core/io/io_buffer.h"
#include "server/core/io/uring_env.h"
#include "tests/server/tier/tier_test_util.h"

namespace zerostate::server::io {
namespace {

constexpr uint32_t kLen = 2 * kIoAlign;

class FaultEnvTest : public ::testing::Test {
 protected:
  FaultEnvTest() : env_(std::make_shared<FaultEnv>(NewUringEnv())) {
    auto file = env_->CreateFile(dir_.path() + "/f.dat");
    EXPECT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
    auto q = env_->NewQueue(4);
    EXPECT_TRUE(q.ok()) << q.status();
    queue_ = *std::move(q);
    for (int i = 0; i < 4; ++i) {
      bufs_[i] = IoBuffer(kLen);
      std::memset(bufs_[i].data(), 'a' + i, kLen);
    }
  }

  IoRequest Req(IoOp op, int i, uint64_t offset) {
    return IoRequest{op, file_.get(), offset, bufs_[i].data(), kLen, static_cast<uint64_t>(i)};
  }

  absl::Status Run(IoOp op, int i, uint64_t offset) { return RunOne(*queue_, Req(op, i, offset)); }

  server::ScratchDir dir_;
  std::shared_ptr<FaultEnv> env_;
  std::unique_ptr<File> file_;
  std::unique_ptr<IoQueue> queue_;
  IoBuffer bufs_[4];
};

TEST_F(FaultEnvTest, ManyRequestsInFlightRoundTrip) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(queue_->Submit(Req(IoOp::kWrite, i, i * kLen)).ok());
  EXPECT_EQ(queue_->in_flight(), 4);
  for (int i = 0; i < 4; ++i) {
    auto done = queue_->Wait();
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_TRUE(done->status().ok()) << done->status();
  }
  for (int i = 0; i < 4; ++i) std::memset(bufs_[i].data(), 0, kLen);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Run(IoOp::kRead, i, (3 - i) * kLen).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bufs_[i].data()[kLen - 1], 'a' + 3 - i) << i;
  EXPECT_TRUE(file_->Sync().ok());
}

TEST_F(FaultEnvTest, ReadPastEndIsShortReadDataLoss) {
  ASSERT_TRUE(Run(IoOp::kWrite, 0, 0).ok());
  absl::Status s = Run(IoOp::kRead, 1, kIoAlign);  // only half of it exists
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("short read at offset 4096"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(file_->path()), absl::string_view::npos) << s;
}

TEST_F(FaultEnvTest, InjectedErrnoFaultsNameFileOffsetAndErrno) {
  ASSERT_TRUE(Run(IoOp::kWrite, 0, 0).ok());
  env_->AddRule({FaultKind::kEio, IoOp::kRead, "", 0, 1});
  absl::Status s = Run(IoOp::kRead, 1, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("read of 8192 bytes at offset 0 in " + file_->path()),
            absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("Input/output error"), absl::string_view::npos) << s;
  EXPECT_TRUE(Run(IoOp::kRead, 1, 0).ok());  // times = 1: the next one passes

  env_->AddRule({FaultKind::kEnospc, IoOp::kWrite, "f.dat", 0, 1});
  s = Run(IoOp::kWrite, 2, kLen);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("No space left on device"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("offset 8192"), absl::string_view::npos) << s;
  EXPECT_EQ(env_->faults_injected(), 2u);
}

TEST_F(FaultEnvTest, ShortReadAndCorruptionOnRead) {
  ASSERT_TRUE(Run(IoOp::kWrite, 0, 0).ok());
  env_->AddRule({FaultKind::kShortRead, IoOp::kRead, "", 0, 1});
  absl::Status s = Run(IoOp::kRead, 1, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("4096 of 8192 bytes"), absl::string_view::npos) << s;

  env_->AddRule({FaultKind::kCorrupt, IoOp::kRead, "", 0, 1});
  ASSERT_TRUE(Run(IoOp::kRead, 1, 0).ok());  // corruption is silent at this layer
  EXPECT_NE(std::memcmp(bufs_[0].data(), bufs_[1].data(), kLen), 0);
  ASSERT_TRUE(Run(IoOp::kRead, 1, 0).ok());
  EXPECT_EQ(std::memcmp(bufs_[0].data(), bufs_[1].data(), kLen), 0);
}

TEST_F(FaultEnvTest, RulesSkipCountAndFilterByPath) {
  env_->AddRule({FaultKind::kEio, std::nullopt, "other-file", 0, UINT64_MAX});
  env_->AddRule({FaultKind::kEio, IoOp::kWrite, "", 2, 2});
  EXPECT_TRUE(Run(IoOp::kWrite, 0, 0).ok());
  EXPECT_TRUE(Run(IoOp::kWrite, 0, 0).ok());
  EXPECT_FALSE(Run(IoOp::kWrite, 0, 0).ok());
  EXPECT_FALSE(Run(IoOp::kWrite, 0, 0).ok());
  EXPECT_TRUE(Run(IoOp::kWrite, 0, 0).ok());
  env_->ClearRules();
  EXPECT_EQ(env_->faults_injected(), 2u);
}

// The fallback where io_uring is not allowed: same results, same errors.
TEST_F(FaultEnvTest, SyncQueueRoundTripsAndReportsShortReads) {
  auto env = NewSyncEnv();
  auto q = env->NewQueue(2);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE((*q)->Submit(Req(IoOp::kWrite, 0, 0)).ok());
  ASSERT_TRUE((*q)->Submit(Req(IoOp::kWrite, 1, kLen)).ok());
  EXPECT_EQ((*q)->in_flight(), 2);
  for (int i = 0; i < 2; ++i) {
    auto done = (*q)->Wait();
    ASSERT_TRUE(done.ok() && done->status().ok());
  }
  ASSERT_TRUE(RunOne(**q, Req(IoOp::kRead, 2, kLen)).ok());
  EXPECT_EQ(std::memcmp(bufs_[1].data(), bufs_[2].data(), kLen), 0);
  absl::Status s = RunOne(**q, Req(IoOp::kRead, 3, kLen + kIoAlign));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("4096 of 8192 bytes"), absl::string_view::npos) << s;
}

TEST_F(FaultEnvTest, CreateIsExclusiveAndQueueDepthChecked) {
  auto again = env_->CreateFile(file_->path());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_NE(again.status().message().find(file_->path()), absl::string_view::npos);
  auto missing = env_->CreateFile(dir_.path() + "/no/such/dir/f");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInternal) << missing.status();
  EXPECT_NE(missing.status().message().find("No such file or directory"), absl::string_view::npos);
  auto q = env_->NewQueue(0);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument) << q.status();
}

}  // namespace
}  // namespace zerostate::server::io
