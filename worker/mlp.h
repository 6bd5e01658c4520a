// The built-in model: a multi-layer perceptron with GELU or ReLU between
// Linear layers and a mean-squared-error loss, forward and backward on the
// CPU in fp32. Deterministic: the same inputs give bit-identical outputs
// (fixed summation order, no threads, no FMA contraction).
//
// Parameters live in one flat buffer laid out by common/job_spec.h's
// LayoutOf for the tensor list Tensors() returns: for layer l,
// "fc<l>.weight" of shape [out, in] (PyTorch's Linear) then "fc<l>.bias"
// of shape [out]. The flat index space is therefore the one the state
// servers hold.
//
// Thread safety: an Mlp owns scratch activations; use one per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/job_spec.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::worker {

// Called during backward with a flat offset: every gradient element at or
// after `ready_begin` is final for this call (layers finish last to first).
using GradsReadyFn = std::function<void(uint64_t ready_begin)>;

// Called before each layer's forward with a flat offset: every parameter
// below `end` must hold the step's weights when it returns (the engine
// lands gathered weights layer by layer, worker/engine.h).
using WeightsNeededFn = std::function<void(uint64_t end)>;

class Mlp {
 public:
  // REQUIRES: config normalized (worker/config.h).
  explicit Mlp(const v1::MlpConfig& config);

  // The tensors to register, in layout order.
  std::vector<v1::TensorSpec> Tensors() const;

  // Takes the offsets of the tensors. REQUIRES: `layout` is LayoutOf a spec
  // whose tensors are Tensors() (in that order).
  void Bind(const Layout& layout);

  // The offsets ForwardBackward passes to `ready`. REQUIRES: Bind() was called.
  std::vector<uint64_t> ReadyPoints() const { return weight_offset_; }

  int num_layers() const { return static_cast<int>(dims_.size()) - 1; }
  uint32_t input_dim() const { return dims_.front(); }
  uint32_t output_dim() const { return dims_.back(); }
  // Multiply-adds of one sample's forward pass (for FLOP figures).
  uint64_t MacsPerSample() const;

  // Runs forward on `batch` samples x[batch][input_dim] against targets
  // y[batch][output_dim], then backward of loss * loss_scale, adding the
  // gradient into `grads` (zeroed by the caller when it starts a step).
  // Returns the mean squared error (unscaled). `ready(x)`, if set, is
  // called as the gradients from flat offset x up are final (every 64 rows
  // of a layer's weight, from the top down); `need(x)`, if set, before the
  // forward reads the weights below x (every 64 rows, then the bias).
  // `overwrite`: the gradients are written, not added to `grads` (the
  // first micro-batch of a step: no pass zeroing them first; the elements
  // between tensors are not touched). REQUIRES: Bind() was called.
  float ForwardBackward(const float* params, const float* x, const float* y, uint32_t batch,
                        float loss_scale, float* grads, const GradsReadyFn& ready,
                        const WeightsNeededFn& need = nullptr, bool overwrite = false);

  // Forward only: the mean squared error of `params` on the batch.
  float Loss(const float* params, const float* x, const float* y, uint32_t batch);

 private:
  void Forward(const float* params, const float* x, uint32_t batch,
               const WeightsNeededFn& need = nullptr);
  float OutputGrad(const float* y, uint32_t batch, float loss_scale);
  void BackwardLayer(int l, const float* params, uint32_t batch, float* grads,
                     const GradsReadyFn& ready, bool overwrite);

  std::vector<uint32_t> dims_;  // input, hidden..., output
  bool relu_ = false;
  std::vector<uint64_t> weight_offset_, bias_offset_;
  // Scratch, per layer boundary k: pre-activation z_[k] and activation a_[k]
  // ([batch][dims_[k]]); a_[0] is the input. d_ holds the running gradient.
  std::vector<std::vector<float>> z_, a_;
  std::vector<float> d_, d_next_;
};

}  // namespace zerostate::worker
