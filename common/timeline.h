// A timeline of one process's events, to tell where a step's time goes
// across the trainer and its same-host state servers: every event carries
// its CLOCK_MONOTONIC time, which is the same clock in every process of a
// host, so the worker's and the servers' files merge into one timeline
// (bench/step/timeline.py). Off unless Start was called (zerostate-server
// and zerostate-worker --timeline=PATH); Record then costs a relaxed load.
// On, it costs a clock read and an append under a mutex, up to kMaxEvents
// (later events are counted as dropped, not kept).
//
// An event is a name (a string literal: only the pointer is kept) and up
// to two numbers (a block, a step; -1 where none), e.g.
//   Timeline::Record("fold_end", block, node);
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zerostate {

class Timeline {
 public:
  static constexpr uint64_t kMaxEvents = uint64_t{1} << 24;

  // Records from now on, for Flush to write to `path` (created or
  // truncated there). INVALID_ARGUMENT for an empty path; the path is
  // opened only by Flush.
  static absl::Status Start(const std::string& path);
  static bool on();

  static void Record(const char* what, int64_t a = -1, int64_t b = -1);

  // Writes the events recorded so far to the path given to Start, one JSON
  // object per line: {"t_ns":..,"pid":..,"tid":..,"what":"..","a":..,"b":..},
  // then one {"what":"dropped","a":N} line if any was dropped. The events
  // stay recorded (a later Flush writes them all again). OK and nothing
  // written when off; an error names the path.
  static absl::Status Flush();

  // Drops every event and stops recording (tests).
  static void Stop();
};

}  // namespace zerostate
