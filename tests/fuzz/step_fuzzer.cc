// Bytes from the network as a StepRequest, applied with a near deadline
// to a one-node job whose gradient for step 0 is complete: step 0 runs
// the optimizer, later steps wait and time out, bad lr / grad_scale are
// refused. A second Step with the same request must be idempotent.
#include <vector>

#include "fuzz_util.h"
#include "quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  static server::ThreadPool pool(2);
  v1::StepRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  server::JobRegistry registry(fuzz::kRamBudget);
  auto job = fuzz::SmallJob(registry, /*nodes=*/1, /*streamed_init=*/false);
  const uint32_t block_elems = job->layout().block_elems;
  std::vector<float> grad(block_elems, 0.25f);
  for (uint64_t b = 0; b < job->layout().num_blocks(); ++b) {
    v1::Chunk c;
    c.set_job_id("job");
    c.set_block(b);
    c.set_dtype(v1::DTYPE_FP32);
    c.set_data(std::string(reinterpret_cast<const char*>(grad.data()), grad.size() * 4));
    if (!job->pushes().Push(c).ok()) __builtin_trap();
  }
  absl::Time soon = absl::Now() + absl::Milliseconds(1);
  auto first = job->step().Step(req, soon, pool);
  if (!first.ok()) return 0;
  auto again = job->step().Step(req, soon, pool);
  if (!again.ok() || !again->already_applied || again->version != first->version) {
    __builtin_trap();
  }
  return 0;
}
