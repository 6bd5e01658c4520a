// The path's stages (path_stages.h) with a step's dependencies between
// them: a piece is folded once the GPU has copied its gradient out, stepped
// once folded, gathered once stepped, copied to the GPU once gathered; and,
// as a barrier, a stage that waits for a stage before it on every piece
// (the global norm: the synchronous step's pass, and the speculative
// step's gathers, wait for every fold). The GPU's gradients leave in the backward's order (the
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

// The CPU stage `held` starts on no piece before the stage `after` (one
// before it in the chain) is done on every piece. Empty: none.
struct Barrier {
  std::string held;
  std::string after;
};

// The barriers of the steps the server runs. The synchronous step's pass
// waits for the whole gradient's norm. The speculative step's pass does
// not (it assumes a clip factor of 1), but no weight leaves before the
// norm has validated it: its gathers wait for every fold.
inline Barrier SynchronousBarrier() { return {"pass", "fold"}; }
inline Barrier SpeculativeBarrier() { return {"gather", "fold"}; }

// Runs every stage of `stages` (a chain, as PathBuffers::stages(): a DMA
// stage may come first and last; all over the same pieces) over every
// piece, in the order above, on `threads` CPU threads (the DMA stages on a
// thread each, besides), with `barrier`. INVALID_ARGUMENT if the barrier
// names a stage the chain lacks, or `after` not before `held`.
absl::StatusOr<Scheduled> RunScheduled(const std::vector<PathStage>& stages, int threads,
                                       const Barrier& barrier = {});

}  // namespace zerostate::bench
