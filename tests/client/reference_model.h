// A single-process reference of a whole job: seeded weights, gradients
// folded in node order after the wire dtype round trip, and the optimizer
// stepped over one flat buffer with zerostate_optimizer's StepBlock. The
// servers must produce the same bits whatever their number, chunking or
// arrival order.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/job_spec.h"

namespace zerostate::testing {

// Gradient value of node `node` at `step` for flat element `i`: 0 outside
// every tensor (layout padding), else a non-zero value in (-1, 1).
float TestGradient(const Layout& layout, uint32_t node, uint64_t step, uint64_t i);

// A node's whole gradient for `step`: used_elems values of TestGradient.
std::vector<float> NodeGradient(const Layout& layout, uint32_t node, uint64_t step);

class ReferenceModel {
 public:
  // REQUIRES: spec is normalized and not streamed_init.
  explicit ReferenceModel(const v1::JobSpec& spec);

  // Applies step `step` with the given gradients of every node (each
  // used_elems long, fp32 before the wire conversion to grad_dtype).
  void Step(uint64_t step, const std::vector<std::vector<float>>& node_grads, float lr,
            float grad_scale);

  const Layout& layout() const { return layout_; }
  // The fp32 master weights, total_elems long.
  const float* master() const { return master_.get(); }
  // The weights Gather serves decoded to fp32 (the low-precision copy, or
  // the masters when weight_dtype is fp32).
  std::vector<float> GatheredWeights() const;

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<float, Free>;
  static Buffer Allocate(uint64_t elems);

  const v1::JobSpec spec_;
  const Layout layout_;
  Buffer master_, m_, v_, grad_;
  std::unique_ptr<uint16_t, Free> lowp_;
};

}  // namespace zerostate::testing
