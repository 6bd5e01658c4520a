// Bytes from the network as a stream of Chunk messages (PushGradients and
// InitWeights), into a small registered job with streamed_init, read as
// the server reads them: ParseChunk over the received slices (here the
// record cut in two at a point the tag chooses), then JobPushes::Push or
// JobPushes::InitWeights on the view. Each record of the input (fuzz_util.h) is
// one message: an even tag pushes it as a gradient, an odd tag writes it
// as initial weights. Afterwards the job must still answer Stats and Step
// without crashing.
#include <algorithm>

#include "common/chunk_wire.h"
#include "fuzz_util.h"
#include "quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  static server::ThreadPool pool(2);
  server::JobRegistry registry(fuzz::kRamBudget);
  auto job = fuzz::SmallJob(registry, /*nodes=*/2, /*streamed_init=*/true);
  for (const fuzz::Record& r : fuzz::SplitRecords(data, size)) {
    const size_t cut = std::min<size_t>(r.tag / 2, r.bytes.size());
    std::vector<grpc::Slice> slices = {grpc::Slice(r.bytes.data(), cut),
                                       grpc::Slice(r.bytes.data() + cut, r.bytes.size() - cut)};
    absl::StatusOr<ChunkView> chunk = ParseChunk(slices);
    if (!chunk.ok()) continue;  // refused before it reaches the job
    if (r.tag % 2 == 0) {
      (void)job->pushes().Push(*chunk);
    } else {
      (void)job->pushes().InitWeights(*chunk);
    }
  }
  absl::Time soon = absl::Now() + absl::Milliseconds(1);
  (void)job->step().Stats(0, soon);
  v1::StepRequest step;
  step.set_job_id("job");
  step.set_lr(1e-3f);
  (void)job->step().Step(step, soon, pool);
  return 0;
}
