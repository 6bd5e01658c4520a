// A same-host gather waiting for a block's whole copy has the step write
// it straight into the client's memory (Block::direct, JobGathers::Gather,
// JobStep::RefsOf), in process: the bytes are those a plain job serves;
// the block's own copy is then not of that version, and a later gather
// converts the master to the same bits; a block the gather does not take
// whole, a gather that comes after the step, and one that gives up before
// it, go the usual way; a speculative job's speculations write it too.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/job_spec.h"
#include "server/core/job.h"
#include "server/core/thread_pool.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 256;

v1::JobSpec Spec(const std::string& id) {
  v1::JobSpec spec;
  spec.set_job_id(id);
  auto* w = spec.add_tensors();
  w->set_name("w");
  w->add_shape(40);
  w->add_shape(30);
  auto* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(50);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_FP32);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  spec.set_block_elems(kBlock);
  spec.set_seed(3);
  return *NormalizeJobSpec(spec);
}

// A same-host client's gather region: every piece in order, each where
// ClientBufferAt said it would be.
class ClientSink final : public GatherSink {
 public:
  explicit ClientSink(size_t bytes) : region_(bytes) {}
  void* Buffer(size_t bytes) override {
    void* at = region_.data() + used_;
    used_ += bytes;
    return at;
  }
  bool BufferReadElsewhere() const override { return true; }
  void* ClientBufferAt(uint64_t at, size_t bytes) override {
    return used_ + at + bytes <= region_.size() ? region_.data() + used_ + at : nullptr;
  }
  bool Emit(const ChunkFields&) override { return true; }
  bool Cancelled() override { return cancelled_.load(); }
  void Cancel() { cancelled_ = true; }
  const std::vector<char>& region() const { return region_; }

 private:
  std::atomic<bool> cancelled_{false};
  std::vector<char> region_;
  size_t used_ = 0;
};

class DirectCopyTest : public ::testing::Test {
 protected:
  DirectCopyTest() : pool_(2) {
    direct_ = *Job::Create(Spec("direct"), {"a:1"}, 0);
    plain_ = *Job::Create(Spec("plain"), {"a:1"}, 0);
  }

  uint64_t blocks() const { return direct_->layout().num_blocks(); }
  Range Whole() const { return {0, blocks() * kBlock}; }

  // The same gradient of `step` into both jobs, every block.
  void PushBoth(uint64_t step) {
    std::mt19937 rng(step + 1);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> g(blocks() * kBlock);
    for (const TensorSlot& t : direct_->layout().tensors) {
      for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) g[i] = d(rng);
    }
    for (Job* job : {direct_.get(), plain_.get()}) {
      for (uint64_t b = 0; b < blocks(); ++b) {
        v1::Chunk c;
        c.set_step(step);
        c.set_block(b);
        c.set_dtype(v1::DTYPE_FP32);
        c.set_data(std::string(reinterpret_cast<const char*>(g.data() + b * kBlock), kBlock * 4));
        ASSERT_TRUE(job->pushes().Push(c).ok());
      }
    }
  }

  void StepBoth(uint64_t step) {
    v1::StepRequest req;
    req.set_step(step);
    req.set_lr(1e-2f);
    req.set_grad_scale(1.0f);
    for (Job* job : {direct_.get(), plain_.get()}) {
      auto out = job->step().Step(req, absl::Now() + absl::Seconds(10), pool_);
      ASSERT_TRUE(out.ok()) << out.status();
    }
  }

  // The bf16 bytes of `job`'s whole shard at `version`, as a remote client
  // gets them (no client memory: the usual copy or conversion).
  static std::string Served(Job& job, uint64_t version) {
    std::string out;
    auto s = job.gathers().Gather({0, job.layout().num_blocks() * kBlock}, version,
                                  v1::DTYPE_BF16, kBlock, absl::Now() + absl::Seconds(5),
                                  [&](const v1::Chunk& c) {
                                    out += c.data();
                                    return true;
                                  });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // A whole-shard gather of `version` into client memory, on its thread.
  struct WaitingGather {
    explicit WaitingGather(size_t bytes) : sink(bytes) {}
    ~WaitingGather() {
      if (thread.joinable()) thread.join();
    }
    ClientSink sink;
    absl::Status status;
    uint64_t direct = 0;  // Gather's direct_elems
    std::thread thread;
  };
  // Starts one, and returns once `registered` blocks have memory registered.
  std::unique_ptr<WaitingGather> StartGather(uint64_t version, uint64_t registered) {
    auto g = std::make_unique<WaitingGather>(blocks() * kBlock * 2);
    WaitingGather* out = g.get();
    g->thread = std::thread([this, out, version] {
      out->status = direct_->gathers().Gather(Whole(), version, v1::DTYPE_BF16, kBlock,
                                              absl::Now() + absl::Seconds(10), out->sink,
                                              &out->direct);
    });
    AwaitRegistered(registered);
    return g;
  }

  // Until every block the gather takes whole has its memory registered.
  void AwaitRegistered(uint64_t n) {
    for (;;) {
      uint64_t registered = 0;
      for (uint64_t b = 0; b < blocks(); ++b) {
        Block& block = direct_->shard().block(b);
        absl::MutexLock lock(&block.mu);
        registered += block.direct.to != nullptr;
      }
      if (registered == n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Blocks whose own copy is not of their version (the step wrote it to a
  // gather's memory).
  uint64_t NotCurrent() {
    uint64_t n = 0;
    for (uint64_t b = 0; b < blocks(); ++b) {
      Block& block = direct_->shard().block(b);
      absl::MutexLock lock(&block.mu);
      n += !block.lowp_current;
    }
    return n;
  }

  // Blocks the whole-shard gather takes whole: all but a last one the
  // layout pads.
  uint64_t Whole(Job& job) {
    uint64_t n = 0;
    for (uint64_t b = 0; b < blocks(); ++b) {
      Block& block = job.shard().block(b);
      n += block.required == kBlock;
    }
    return n;
  }

  ThreadPool pool_;
  std::unique_ptr<Job> direct_, plain_;
};

TEST_F(DirectCopyTest, TheStepWritesTheWaitingGathersMemory) {
  ASSERT_GE(blocks(), 3u);
  const uint64_t whole = Whole(*direct_);
  ASSERT_GE(whole, 2u);
  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    PushBoth(step);
    auto gather = StartGather(step + 1, whole);
    StepBoth(step);
    gather->thread.join();
    ASSERT_TRUE(gather->status.ok()) << gather->status;
    EXPECT_EQ(gather->direct, whole * kBlock);  // as reported (zerostate_gather_direct_elements_total)
    const std::string want = Served(*plain_, step + 1);
    ASSERT_EQ(want.size(), gather->sink.region().size());
    EXPECT_EQ(std::memcmp(want.data(), gather->sink.region().data(), want.size()), 0);
    EXPECT_EQ(NotCurrent(), whole);  // the step wrote those blocks' copies to the gather
    AwaitRegistered(0);              // every registration taken back
    // Anyone else converts the master: the same bits.
    EXPECT_EQ(Served(*direct_, step + 1), want);
  }
}

TEST_F(DirectCopyTest, AGatherAfterTheStepOrGivenUpBeforeItCopies) {
  PushBoth(0);
  {
    // Gives up before the step: its registrations go with it.
    ClientSink sink(blocks() * kBlock * 2);
    const absl::Status s = direct_->gathers().Gather(Whole(), 1, v1::DTYPE_BF16, kBlock,
                                                     absl::Now() + absl::Milliseconds(20), sink);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    AwaitRegistered(0);
  }
  StepBoth(0);
  EXPECT_EQ(NotCurrent(), 0u);  // no gather waited: the blocks' own copies
  ClientSink sink(blocks() * kBlock * 2);
  ASSERT_TRUE(direct_->gathers()
                  .Gather(Whole(), 1, v1::DTYPE_BF16, kBlock, absl::Now() + absl::Seconds(5), sink)
                  .ok());
  const std::string want = Served(*plain_, 1);
  EXPECT_EQ(std::memcmp(want.data(), sink.region().data(), want.size()), 0);
  EXPECT_EQ(NotCurrent(), 0u);
}

// A speculative job: each block's speculation (a Step sent ahead, the
// block complete) writes the copy into the waiting gather's memory without
// the block's mutex; the Step that confirms it commits it there. Step 1's
// Step carries another lr than sent ahead: redone, written again. Step 2's
// gather is cancelled after the speculations, before the Step: the copy
// computed into its memory is not served (and the block's own copy is not
// of the new version either: a later gather converts the master).
TEST_F(DirectCopyTest, ASpeculationWritesTheWaitingGathersMemory) {
  v1::JobSpec spec = Spec("speculative");
  spec.set_speculative_step(true);
  direct_ = *Job::Create(spec, {"a:1"}, 0);
  const uint64_t whole = Whole(*direct_);
  ASSERT_GE(whole, 2u);
  auto speculated = [&] {
    for (;;) {
      uint64_t done = 0;
      for (uint64_t b = 0; b < blocks(); ++b) {
        Block& block = direct_->shard().block(b);
        absl::MutexLock lock(&block.mu);
        done += block.speculation() == Block::Speculation::kDone;
      }
      if (done == blocks()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    const bool cancelled = step == 2;
    auto gather = StartGather(step + 1, whole);
    v1::StepRequest ahead;
    ahead.set_step(step);
    ahead.set_lr(step == 1 ? 2e-2f : 1e-2f);  // StepBoth's is 1e-2
    ahead.set_grad_scale(1.0f);
    ahead.set_ahead(true);
    ASSERT_TRUE(direct_->step().Step(ahead, absl::Now() + absl::Seconds(10), pool_).ok());
    PushBoth(step);
    speculated();
    if (cancelled) {
      gather->sink.Cancel();
      gather->thread.join();
      EXPECT_EQ(gather->status.code(), absl::StatusCode::kCancelled) << gather->status;
      AwaitRegistered(0);
    }
    StepBoth(step);
    const std::string want = Served(*plain_, step + 1);
    if (!cancelled) {
      gather->thread.join();
      ASSERT_TRUE(gather->status.ok()) << gather->status;
      EXPECT_EQ(gather->direct, whole * kBlock);
      ASSERT_EQ(want.size(), gather->sink.region().size());
      EXPECT_EQ(std::memcmp(want.data(), gather->sink.region().data(), want.size()), 0);
    }
    EXPECT_EQ(NotCurrent(), whole);
    AwaitRegistered(0);
    EXPECT_EQ(Served(*direct_, step + 1), want);
  }
}

}  // namespace
}  // namespace zerostate::server
