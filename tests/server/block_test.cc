// Block's transitions (server/core/block.h) on a Block alone: from every
// state, each transition either moves the block as its contract says or
// is refused FAILED_PRECONDITION naming itself and the block, with the
// block left as it was.
#include "server/core/block.h"

#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace zerostate::server {
namespace {

constexpr uint64_t kIndex = 3;

// The states a block's step and speculation can be in together.
enum class State { kIdle, kQueued, kRunning, kDone, kStepping, kSteppingDone };
const State kStates[] = {State::kIdle,     State::kQueued,   State::kRunning,
                         State::kDone,     State::kStepping, State::kSteppingDone};

const char* Name(State s) {
  switch (s) {
    case State::kIdle: return "idle";
    case State::kQueued: return "queued";
    case State::kRunning: return "running";
    case State::kDone: return "done";
    case State::kStepping: return "stepping";
    case State::kSteppingDone: return "stepping with a speculation done";
  }
  return "?";
}

// A block of 16 elements, one node, driven into `state` by legal transitions.
std::unique_ptr<Block> BlockIn(State state) {
  auto b = std::make_unique<Block>(kIndex, 0, 0, 16, 16, 1, false, nullptr,
                                   std::vector<std::pair<uint32_t, uint32_t>>{{0, 16}},
                                   std::vector<GroupRun>{}, /*speculative=*/true);
  absl::MutexLock lock(&b->mu);
  auto step = [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; };
  if (state != State::kIdle && state != State::kStepping) {
    step(b->QueueSpeculation());
    if (state != State::kQueued) step(b->BeginSpeculation());
    if (state == State::kDone || state == State::kSteppingDone) step(b->FinishSpeculation({}));
  }
  if (state == State::kStepping || state == State::kSteppingDone) step(b->BeginStep());
  return b;
}

struct Snapshot {
  uint64_t version;
  bool stepping;
  Block::Speculation speculation;
  bool operator==(const Snapshot&) const = default;
};

Snapshot Of(Block& b) {
  absl::MutexLock lock(&b.mu);
  return {b.version, b.stepping(), b.speculation()};
}

struct Transition {
  std::string name;
  std::function<absl::Status(Block&)> run;  // under b.mu
  std::set<State> legal;
};

TEST(BlockTest, EveryIllegalTransitionIsRefusedByNameAndChangesNothing) {
  using S = State;
  const std::vector<Transition> transitions = {
      {"QueueSpeculation", [](Block& b) { return b.QueueSpeculation(); }, {S::kIdle}},
      {"CancelSpeculation", [](Block& b) { return b.CancelSpeculation(); }, {S::kQueued}},
      {"BeginSpeculation", [](Block& b) { return b.BeginSpeculation(); }, {S::kQueued}},
      {"FinishSpeculation", [](Block& b) { return b.FinishSpeculation({}); }, {S::kRunning}},
      {"DropSpeculation", [](Block& b) { return b.DropSpeculation(); },
       {S::kIdle, S::kQueued, S::kDone, S::kStepping, S::kSteppingDone}},
      {"BeginStep", [](Block& b) { return b.BeginStep(); }, {S::kIdle, S::kQueued, S::kDone}},
      {"AbortStep", [](Block& b) { return b.AbortStep(); }, {S::kStepping, S::kSteppingDone}},
      {"Commit", [](Block& b) { return b.Commit(); },
       {S::kIdle, S::kQueued, S::kDone, S::kStepping, S::kSteppingDone}},
      {"Restore", [](Block& b) { return b.Restore(7); }, {S::kIdle, S::kQueued, S::kDone}},
  };
  for (const Transition& t : transitions) {
    for (State from : kStates) {
      SCOPED_TRACE(t.name + " from " + Name(from));
      auto b = BlockIn(from);
      const Snapshot before = Of(*b);
      absl::Status s;
      {
        absl::MutexLock lock(&b->mu);
        s = t.run(*b);
      }
      if (t.legal.count(from) > 0) {
        EXPECT_TRUE(s.ok()) << s;
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_EQ(s.message().rfind(t.name + ": block 3 ", 0), 0u) << s.message();
      EXPECT_EQ(Of(*b), before) << "a refused transition changed the block";
    }
  }
}

// What the legal transitions leave: a commit raises the version and ends
// the step and any speculation; a restore sets the version; an abort keeps it.
TEST(BlockTest, LegalTransitionsMoveTheBlockAsTheirContractsSay) {
  auto b = BlockIn(State::kSteppingDone);
  {
    absl::MutexLock lock(&b->mu);
    ASSERT_TRUE(b->Commit().ok());
  }
  EXPECT_EQ(Of(*b), (Snapshot{1, false, Block::Speculation::kNone}));
  {
    absl::MutexLock lock(&b->mu);
    ASSERT_TRUE(b->BeginStep().ok());
    ASSERT_TRUE(b->AbortStep().ok());
  }
  EXPECT_EQ(Of(*b), (Snapshot{1, false, Block::Speculation::kNone}));
  {
    absl::MutexLock lock(&b->mu);
    ASSERT_TRUE(b->QueueSpeculation().ok());
    ASSERT_TRUE(b->Restore(5).ok());
  }
  EXPECT_EQ(Of(*b), (Snapshot{5, false, Block::Speculation::kNone}));
}

// The sum a replicator sends straight from the accumulator: pinned only
// once complete, read through PinnedSum, kept (values too) through a
// commit, and a writer's AwaitSumUnpinned returns once the last pin goes.
TEST(BlockTest, APinnedSumIsReadableUntilUnpinnedAndWritersWaitForIt) {
  auto b = BlockIn(State::kIdle);
  std::vector<float> grad(16);
  for (int i = 0; i < 16; ++i) grad[i] = 0.5f * static_cast<float>(i + 1);
  {
    absl::MutexLock lock(&b->mu);
    absl::Status early = b->PinSum();
    EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition) << early;
    EXPECT_EQ(early.message().rfind("PinSum: block 3 ", 0), 0u) << early.message();
    EXPECT_FALSE(b->sum_pinned());
    absl::Status unpinned = b->UnpinSum();
    EXPECT_EQ(unpinned.code(), absl::StatusCode::kFailedPrecondition) << unpinned;
    EXPECT_EQ(unpinned.message().rfind("UnpinSum: block 3 ", 0), 0u) << unpinned.message();
    auto added = b->acc.Add(0, 0, 16, grad.data(), v1::DTYPE_FP32);
    ASSERT_TRUE(added.ok()) << added.status();
    ASSERT_TRUE(b->acc.complete());
    ASSERT_TRUE(b->PinSum().ok());
    ASSERT_TRUE(b->PinSum().ok());  // two readers
    ASSERT_TRUE(b->Commit().ok());  // the pass commits while a lane still sends
    EXPECT_EQ(b->version, 1u);
    EXPECT_TRUE(b->sum_pinned());
    const std::string_view bytes = b->PinnedSum();
    ASSERT_EQ(bytes.size(), 16 * sizeof(float));
    EXPECT_EQ(std::memcmp(bytes.data(), grad.data(), bytes.size()), 0);
    ASSERT_TRUE(b->UnpinSum().ok());
    EXPECT_TRUE(b->sum_pinned());
  }
  bool waited = false;
  std::thread writer([&] {
    absl::MutexLock lock(&b->mu);
    b->AwaitSumUnpinned();
    waited = !b->sum_pinned();
  });
  {
    absl::MutexLock lock(&b->mu);
    ASSERT_TRUE(b->UnpinSum().ok());
  }
  writer.join();
  EXPECT_TRUE(waited);
}

}  // namespace
}  // namespace zerostate::server
