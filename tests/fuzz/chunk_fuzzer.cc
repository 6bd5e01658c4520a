// Bytes from the network as a stream of Chunk messages (PushGradients and
// InitWeights), into a small registered job with streamed_init. Each
// record of the input (fuzz_util.h) is one message: an even tag pushes it
// as a gradient, an odd tag writes it as initial weights. Afterwards the
// job must still answer Stats and Step without crashing.
#include "fuzz_util.h"
#include "quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  static server::ThreadPool pool(2);
  server::JobRegistry registry(fuzz::kRamBudget);
  auto job = fuzz::SmallJob(registry, /*nodes=*/2, /*streamed_init=*/true);
  for (const fuzz::Record& r : fuzz::SplitRecords(data, size)) {
    v1::Chunk chunk;
    if (!chunk.ParseFromString(r.bytes)) continue;  // gRPC refuses it before the handler
    if (r.tag % 2 == 0) {
      (void)job->Push(chunk);
    } else {
      (void)job->InitWeights(chunk);
    }
  }
  absl::Time soon = absl::Now() + absl::Milliseconds(1);
  (void)job->Stats(0, soon);
  v1::StepRequest step;
  step.set_job_id("job");
  step.set_lr(1e-3f);
  (void)job->Step(step, soon, pool);
  return 0;
}
