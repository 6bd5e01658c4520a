// --test_pause: stops global rank 0 at one phase of one step until a file
// exists, so that a fault test lands a server's kill in that phase
// deterministically (tests/worker/kill_phase_test.cc), not after a sleep.
// Thread safety: the hook may be called from any one rank's thread.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine.h"

namespace zerostate::worker {

// The hook for `spec` "PHASE:STEP:FILE" (PHASE: push, step, gather or
// checkpoint; for checkpoint STEP is the checkpoint's version) on global
// rank `rank`: on rank 0, the first time that phase of that step comes, it
// prints "zerostate-worker rank 0: paused before the PHASE of step STEP"
// and waits until FILE exists; later passes (a replay after a rollback)
// and other ranks go on. Empty spec: an empty hook. Errors:
// INVALID_ARGUMENT naming --test_pause and what is wrong.
[[nodiscard]] absl::StatusOr<PhaseHook> TestPauseHook(absl::string_view spec, uint32_t rank);

}  // namespace zerostate::worker
