// What one load_client process measured, and the text lines that carry it
// to load_bench over the client's stdout:
//   push <us> <us> ...      one latency per step, microseconds
//   step <us> ...           (only the client that calls Step)
//   gather <us> ...
//   bytes <pushed> <gathered>
//   done
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerostate::bench {

// Lines of the start handshake: the client prints kReady once connected,
// then waits for kGo on its stdin.
inline constexpr char kReady[] = "ready";
inline constexpr char kGo[] = "go";

struct ClientReport {
  std::vector<int64_t> push_us, step_us, gather_us;
  uint64_t pushed_bytes = 0;
  uint64_t gathered_bytes = 0;

  // The lines above, "done" last, each ending in a newline.
  std::string Format() const;

  // Reads lines with `next_line` up to "done". Errors: INVALID_ARGUMENT
  // naming a line that is not one of the above; those of next_line.
  static absl::StatusOr<ClientReport> Parse(
      const std::function<absl::StatusOr<std::string>()>& next_line);
};

// The q-quantile (0..1) of `v` by nearest rank; 0 for an empty `v`.
double Quantile(std::vector<int64_t> v, double q);

}  // namespace zerostate::bench
