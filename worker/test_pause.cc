#include "worker/test_pause.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace zerostate::worker {

absl::StatusOr<PhaseHook> TestPauseHook(absl::string_view spec, uint32_t rank) {
  if (spec.empty()) return PhaseHook();
  std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 2));
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--test_pause: '", spec, "' ", why, " (want PHASE:STEP:FILE)"));
  };
  if (parts.size() != 3 || parts[2].empty()) return invalid("has too few parts");
  Phase phase;
  if (parts[0] == "push") {
    phase = Phase::kPush;
  } else if (parts[0] == "step") {
    phase = Phase::kStep;
  } else if (parts[0] == "gather") {
    phase = Phase::kGather;
  } else if (parts[0] == "checkpoint") {
    phase = Phase::kCheckpoint;
  } else {
    return invalid("names no phase (push, step, gather, checkpoint)");
  }
  uint64_t step = 0;
  if (!absl::SimpleAtoi(parts[1], &step)) return invalid("has no step number");
  if (rank != 0) return PhaseHook();
  auto done = std::make_shared<std::atomic<bool>>(false);
  const std::string file = parts[2];
  return PhaseHook([=](Phase p, uint64_t s) {
    if (p != phase || s != step || done->exchange(true)) return;
    std::fprintf(stderr, "zerostate-worker rank 0: paused before the %s of step %llu\n",
                 PhaseName(p), static_cast<unsigned long long>(s));
    while (access(file.c_str(), F_OK) != 0) absl::SleepFor(absl::Milliseconds(5));
  });
}

}  // namespace zerostate::worker
