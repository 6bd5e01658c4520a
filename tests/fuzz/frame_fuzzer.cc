// Bytes from the network as a TCP data plane connection's byte stream
// (common/frame.h): frames parsed one after another as the server reads
// them, until the first one it refuses; each PUSH's chunk goes to
// JobPushes::Push of a small job, each GATHER's request to JobGathers::CheckGather and
// JobGathers::Gather (near deadline). A parsed frame must lie inside the input,
// its payload inside the frame.
#include "common/frame.h"
#include "fuzz_util.h"
#include "quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerostate;
  server::JobRegistry registry(fuzz::kRamBudget);
  auto job = fuzz::SmallJob(registry, /*nodes=*/2, /*streamed_init=*/false);
  absl::Span<const uint8_t> rest(data, size);
  while (!rest.empty()) {
    absl::StatusOr<ParsedFrame> f = ParseFrame(rest);
    if (!f.ok()) break;  // the server answers ERROR and closes
    if (f->size > rest.size() || f->payload.data() < rest.data() ||
        f->payload.data() + f->payload.size() > rest.data() + f->size) {
      __builtin_trap();
    }
    if (f->header.type == FrameType::kPush) {
      (void)job->pushes().Push(
          FrameChunkView(f->meta.chunk(), f->payload.data(), f->payload.size()));
    } else if (f->header.type == FrameType::kGather) {
      auto range = job->gathers().CheckGather(f->meta.gather());
      if (range.ok()) {
        (void)job->gathers().Gather(*range, f->meta.gather().min_version(),
                                    f->meta.gather().dtype(),
                                    /*max_piece=*/100, absl::Now() + absl::Milliseconds(1),
                                    [](const v1::Chunk&) { return true; });
      }
    }
    rest.remove_prefix(f->size);
  }
  return 0;
}
