// The path's stages (path_stages.h) with the speculative step's
// dependencies between them: a piece is folded once the GPU has copied its
// gradient out, stepped once folded, gathered once stepped, copied to the
// GPU once gathered. The GPU's gradients leave in the backward's order (the
// last piece first, as the layout follows the forward); the CPU stages take
// the lowest piece that has a stage ready (the next forward needs the first
// layer first, server/core/needed_first_queue.h); the weights return to the
// GPU in the forward's order. No RPC, no lock, no GPU compute: the best the
// speculative step can do with these kernels on this host.
#pragma once

#include "absl/status/statusor.h"
#include "bench/step/path_stages.h"

namespace zerostate::bench {

struct Scheduled {
  double seconds = 0;        // from the first d2h copy to the last piece's last stage
  double first_seconds = 0;  // to the first piece's last stage (the next forward could start)
};

// Runs every stage of `stages` (a chain, as PathBuffers::stages(): a DMA
// stage may come first and last; all over the same pieces) over every
// piece, in the order above, on `threads` CPU threads (the DMA stages on a
// thread each, besides). `barrier`: a CPU stage of that name starts on no
// piece before the stage before it is done on every piece (the
// synchronous step's pass, which waits for the whole gradient's norm);
// empty: none.
absl::StatusOr<Scheduled> RunScheduled(const std::vector<PathStage>& stages, int threads,
                                       const std::string& barrier = "");

}  // namespace zerostate::bench
