// Bytes from the network as a RegisterJobRequest, through the registry
// exactly as StateServiceImpl::RegisterJob hands them over. A spec the
// registry accepts is registered again with its token (the retry path) and
// deleted.
#include "fuzz_util.h"
#include "quiet_logs.h"
#include "server/rpc/job_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  v1::RegisterJobRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  const std::string token = "fuzz-job-token-0123456789abcdef0123456789";
  server::JobRegistry registry(fuzz::kRamBudget);
  auto first = registry.Register(req, token);
  if (!first.ok()) {
    if (registry.size() != 0 || registry.ram_used() != 0) __builtin_trap();  // nothing allocated
    return 0;
  }
  if (registry.ram_used() > registry.ram_budget()) __builtin_trap();
  auto again = registry.Register(req, token);
  if (!again.ok() || again->created || again->job != first->job) __builtin_trap();
  (void)JobInfoOf(*first->job);
  auto deleted = registry.Delete(req.spec().job_id(), token);
  if (!deleted.ok() || !*deleted || registry.size() != 0) __builtin_trap();
  return 0;
}
