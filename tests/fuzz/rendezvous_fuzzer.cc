// Bytes from the network as a sequence of RendezvousRequests (one per
// record, fuzz_util.h) joined in order on one table with a near deadline,
// so that retries, conflicting worlds or values and completed keys are
// all reachable.
#include "fuzz_util.h"
#include "server/core/rendezvous.h"
#include "quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  server::RendezvousTable table;
  for (const fuzz::Record& r : fuzz::SplitRecords(data, size)) {
    v1::RendezvousRequest req;
    if (!req.ParseFromString(r.bytes)) continue;
    // Two owners, one with a job: both quotas and their evictions are reachable.
    const bool job = req.job_id().size() % 2 == 0;
    const server::RendezvousOwner owner{job ? "job" : "guest", job};
    auto values = table.Join(owner, req.job_id(), req.key(), req.rank(), req.world(),
                             req.value(), absl::Now() + absl::Microseconds(200));
    if (values.ok() && values->size() != req.world()) __builtin_trap();
  }
  table.Shutdown();
  return 0;
}
