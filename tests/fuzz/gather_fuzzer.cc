// Bytes from the network as a GatherRequest: JobGathers::CheckGather, and for a
// request it accepts, JobGathers::Gather with a near deadline (a min_version in
// the future times out; the served chunks must lie in the range).
#include "fuzz_util.h"
#include "quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  v1::GatherRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  server::JobRegistry registry(fuzz::kRamBudget);
  auto job = fuzz::SmallJob(registry, /*nodes=*/1, /*streamed_init=*/false);
  auto range = job->gathers().CheckGather(req);
  if (!range.ok()) return 0;
  if (range->begin > range->end || range->end > job->layout().total_elems) __builtin_trap();
  uint64_t served = 0;
  (void)job->gathers().Gather(*range, req.min_version(), req.dtype(), /*max_piece=*/100,
                              absl::Now() + absl::Milliseconds(1), [&](const v1::Chunk& c) {
                                served += c.data().size();
                                return true;
                              });
  return 0;
}
