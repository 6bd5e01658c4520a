// The reference a run through the service must match: the same training in
// one process with no service, no threads and no network. It mirrors every
// sum of the real path in the same order:
//   - inside a node, ranks' gradients are summed in local-rank order (the
//     CPU backend's reduce-scatter), each rank's being the sum of its
//     micro-batches in order (the model adds into one buffer);
//   - the node sum crosses the wire in grad_dtype (encoded, decoded);
//   - the servers fold node sums in node-id order, in fp32, from zero;
//   - the optimizer is zerostate_optimizer's StepBlock on the same block
//     boundaries, with t = the steps applied so far + 1 (a skipped step
//     does not count, as on the server) and the same grad_scale (DecideStep);
//   - the model then computes with the weight_dtype copy of the masters.
// Gradient statistics are summed over blocks in order; with one server
// this is the servers' order too (with several, clipping may differ in
// the last bits: tests that need bit-identity leave clipping off).
#pragma once

#include <vector>

#include "worker/engine.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::worker {

struct ReferenceResult {
  std::vector<float> master;       // final fp32 master weights, total_elems
  std::vector<bool> skipped;       // per step
  std::vector<float> loss_rank0;   // rank 0's loss per step
};

// Trains steps [0, config.train().steps()) for `topo.num_nodes` nodes of
// `topo.local_size` ranks. REQUIRES: config normalized for topo.world().
ReferenceResult RunReference(const v1::WorkerConfig& config, const Topology& topo);

}  // namespace zerostate::worker
