// Reseed (server/core/reseed.h) on a job of the core alone: a copy
// rewritten whole at a version, and every bad seed refused by name with
// the copy left as it was.
#include "server/core/reseed.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/aligned_buffer.h"
#include "server/core/job_registry.h"

namespace zerostate::server {
namespace {

constexpr uint64_t kVersion = 3;

v1::RegisterJobRequest Request() {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("job");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(700);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->set_num_nodes(1);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_FP32);
  spec->set_block_elems(256);
  req.add_servers("a:1");
  req.set_shard_index(0);
  return req;
}

class ReseedTest : public ::testing::Test {
 protected:
  ReseedTest() : registry_(1 << 30) {
    auto reg = registry_.Register(Request());
    EXPECT_TRUE(reg.ok()) << reg.status();
    job_ = reg->job;
    floats_ = job_->shard().tier_shape().block_floats();
  }

  // Block `local`'s state as the seed carries it: every float `local + 1`.
  std::string State(uint64_t local) const {
    std::vector<float> f(floats_, static_cast<float>(local + 1));
    return std::string(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
  }

  // Block `local` of the copy now: its version and its state.
  std::pair<uint64_t, std::string> Read(uint64_t local) {
    AlignedBuffer<float> buf(floats_);
    uint64_t version = 0;
    EXPECT_TRUE(job_->gathers().ReadBlock(local, 0, absl::Now() + absl::Seconds(5), buf.data(),
                                          &version).ok());
    return {version, std::string(reinterpret_cast<const char*>(buf.data()),
                                 floats_ * sizeof(float))};
  }

  // Every block's (version, state).
  std::vector<std::pair<uint64_t, std::string>> Copy() {
    std::vector<std::pair<uint64_t, std::string>> all;
    for (uint64_t b = 0; b < job_->blocks().size(); ++b) all.push_back(Read(b));
    return all;
  }

  Reseed::Header Header() const { return {0, kVersion, 2, ""}; }

  JobRegistry registry_;
  std::shared_ptr<Job> job_;
  size_t floats_ = 0;
};

void ExpectInvalid(const absl::Status& s, const std::string& needle) {
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
}

TEST_F(ReseedTest, EveryBlockIsWrittenAtTheVersionOnceAllCame) {
  const uint64_t blocks = job_->blocks().size();
  ASSERT_GE(blocks, 2u);
  auto reseed = Reseed::Begin(*job_, Header());
  ASSERT_TRUE(reseed.ok()) << reseed.status();
  for (uint64_t b = blocks; b-- > 0;) {  // any order
    ASSERT_TRUE(reseed->Add(job_->blocks().begin + b, kVersion, State(b)).ok());
  }
  EXPECT_EQ(reseed->received(), blocks);
  ASSERT_TRUE(reseed->Commit().ok());
  for (uint64_t b = 0; b < blocks; ++b) {
    auto [version, state] = Read(b);
    EXPECT_EQ(version, kVersion) << "block " << b;
    EXPECT_EQ(state, State(b)) << "block " << b;
  }
  EXPECT_EQ(job_->step().applied_steps().Before(kVersion), 2u);
}

TEST_F(ReseedTest, BadSeedsAreRefusedByNameAndTheCopyStaysAsItWas) {
  const auto before = Copy();
  const uint64_t begin = job_->blocks().begin;
  const uint64_t blocks = job_->blocks().size();
  Reseed::Header header = Header();
  header.applied_steps = kVersion + 1;
  ExpectInvalid(Reseed::Begin(*job_, header).status(), "applied_steps 4 exceed version 3");

  auto reseed = Reseed::Begin(*job_, Header());
  ASSERT_TRUE(reseed.ok()) << reseed.status();
  ExpectInvalid(reseed->Add(begin + blocks, kVersion, State(0)), "is outside shard 0");
  ExpectInvalid(reseed->Add(begin, kVersion + 1, State(0)), "is at version 4, not the shard's 3");
  ExpectInvalid(reseed->Add(begin, kVersion, "abc"), "carries 3 bytes of state");
  ASSERT_TRUE(reseed->Add(begin, kVersion, State(0)).ok());
  ExpectInvalid(reseed->Add(begin, kVersion, State(0)), "came twice");
  ExpectInvalid(reseed->Commit(), absl::StrCat("block ", begin + 1, " of shard 0 is missing"));
  EXPECT_EQ(Copy(), before);
}

}  // namespace
}  // namespace zerostate::server
