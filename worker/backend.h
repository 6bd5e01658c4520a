// Where a worker's model lives and how local ranks exchange inside a node.
//
// A Backend owns one local rank's working parameters and gradient buffer
// (flat, total_elems fp32 elements in the job's layout), runs the built-in
// model on them, and implements the two intra-node collectives of a step.
// Implementations: CPU (worker/cpu_backend.h: ranks as threads of one
// process, or as processes sharing memory) and CUDA+NCCL (worker/cuda/).
//
// Collectives: every local rank of a node calls them with the same buckets
// in the same order. The sum over local ranks is taken in local-rank order,
// so a node's gradient is the same bits on every run.
// Thread safety: one thread per Backend object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shard_map.h"
#include "worker/mlp.h"

namespace zerostate::worker {

// Host memory from a backend (pinned for a GPU), freed by its deleter.
using HostBuffer = std::unique_ptr<float, std::function<void(float*)>>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual uint32_t local_rank() const = 0;
  virtual uint32_t local_size() const = 0;

  // Sets this rank's gradient buffer to zero (start of a step).
  [[nodiscard]] virtual absl::Status ZeroGrads() = 0;

  // One micro-batch of forward and backward on host inputs x[batch][in] and
  // targets y[batch][out]; adds the gradient of loss * loss_scale to the
  // gradient buffer and calls `ready` as layers finish (see GradsReadyFn).
  // Returns the unscaled loss.
  [[nodiscard]] virtual absl::StatusOr<float> ForwardBackward(const float* x, const float* y,
                                                              uint32_t batch, float loss_scale,
                                                              const GradsReadyFn& ready) = 0;

  // Has ForwardBackward call `need` before each layer's forward (empty:
  // never), so the weights can land layer by layer. Returns false when the
  // backend cannot (the engine then lands every weight before the step).
  virtual bool SetWeightsNeeded(WeightsNeededFn need) { return false; }

  // The element type of the host side of the collectives: what
  // ReduceScatter writes to host_out (grad_staging) and AllGather reads
  // from host_in (weight_staging). FP32, or the job's wire dtype when the
  // backend converts on the device (the CUDA backend for BF16: half the
  // bytes to copy, and the client sends and receives them as they are).
  // The conversion is the client's (common/convert.h) bit for bit.
  virtual v1::DType grad_staging() const { return v1::DTYPE_FP32; }
  virtual v1::DType weight_staging() const { return v1::DTYPE_FP32; }

  // Collective. On return host_out[0, share.size()) holds this rank's share
  // (LocalShare(bucket, local_size, local_rank)) of the node's summed
  // gradient over `bucket`, as grad_staging() elements:
  // StartReduceScatter, then FinishReduceScatter.
  [[nodiscard]] absl::Status ReduceScatter(Range bucket, void* host_out) {
    if (auto s = StartReduceScatter(bucket, host_out); !s.ok()) return s;
    return FinishReduceScatter();
  }

  // Collective. Starts ReduceScatter(bucket, host_out); host_out holds the
  // share once the FinishReduceScatter that ends this start returned OK.
  // Starts are finished in the order they were made, so several buckets
  // can be under way at once (a GPU backend reduces and copies the next
  // while the host pushes the last). Every successful start must be
  // finished; a failed one needs no finish.
  [[nodiscard]] virtual absl::Status StartReduceScatter(Range bucket, void* host_out) = 0;

  // Waits for the oldest unfinished StartReduceScatter. REQUIRES: one is
  // unfinished. The default: starts are done when they return.
  [[nodiscard]] virtual absl::Status FinishReduceScatter() { return absl::OkStatus(); }

  // Collective. host_in[0, share.size()) holds new weights for this rank's
  // share of `bucket` (weight_staging() elements); on return every local
  // rank's parameters hold the new weights of the whole bucket.
  [[nodiscard]] virtual absl::Status AllGather(Range bucket, const void* host_in) = 0;

  // Returns once every AllGather so far has read its host_in, so that the
  // caller may write it again (a GPU backend copies it asynchronously).
  // The default: AllGather reads it before it returns.
  [[nodiscard]] virtual absl::Status AllGathersRead() { return absl::OkStatus(); }

  // Host memory for `elems` floats that the collectives copy to and from
  // fastest (the engine's staging). Errors: RESOURCE_EXHAUSTED or INTERNAL.
  [[nodiscard]] virtual absl::StatusOr<HostBuffer> AllocHost(uint64_t elems) = 0;

  // The same for `bytes` at `data` that the caller allocated (a shared
  // buffer of the client's), kept alive by `keep` until the HostBuffer is
  // dropped: a GPU backend registers it with its runtime (pinned, so the
  // collectives copy to and from it directly) and unregisters it then.
  // The default uses it as it is. Errors: INTERNAL (the runtime refused).
  [[nodiscard]] virtual absl::StatusOr<HostBuffer> AdoptHost(void* data, uint64_t bytes,
                                                             std::shared_ptr<void> keep) {
    (void)bytes;
    // The deleter lets go of `keep` itself: HostBuffer::reset() runs it
    // but keeps the deleter.
    return HostBuffer(static_cast<float*>(data),
                      [keep = std::move(keep)](float*) mutable { keep.reset(); });
  }

  // A node of one rank whose gradients and parameters are fp32 host memory
  // (the staging's dtype) may offer them as the staging itself: the engine
  // then pushes each bucket straight from the gradients and gathers it
  // straight into the parameters, with no ReduceScatter or AllGather copy
  // (on the CPU backend, two copies of every parameter a step on the
  // rank's own thread). Indexed by flat element. nullptr: the staging and
  // the collectives. REQUIRES (in place): local_size() == 1.
  virtual float* GradsInPlace() { return nullptr; }
  virtual float* ParamsInPlace() { return nullptr; }

  // Copies parameters `elems` of this rank to host memory.
  [[nodiscard]] virtual absl::Status ReadParams(Range elems, float* host) = 0;

  // Collective: true on every local rank if any passed `failed` true, so
  // the ranks of a node agree on a step's outcome (and roll back together).
  // The default does not vote (a backend whose ranks cannot disagree).
  [[nodiscard]] virtual absl::StatusOr<bool> NodeAnyFailed(bool failed) { return failed; }
};

}  // namespace zerostate::worker
