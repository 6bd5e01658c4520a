// The CUDA + NCCL backend: the built-in MLP on one GPU (cuBLAS GEMMs,
// element-wise kernels), gradients reduce-scattered and weights
// all-gathered inside the node with NCCL on their own stream, ordered
// against the compute stream by CUDA events.
//
// Overlap: ForwardBackward enqueues the whole backward pass first,
// recording an event per layer, and only then reports the layers ready;
// each StartReduceScatter waits (on the GPU) for its layer's event and
// queues the reduction and the copy to pinned host memory on the comm
// stream, recording an event of its own that FinishReduceScatter waits
// for, so backward of lower layers and the copies of later buckets run
// while earlier buckets are pushed. AllGather ends with an event the
// forward waits on: before the first layer, and with SetWeightsNeeded
// (layer-by-layer landing) before each layer, right after the engine
// landed that layer's buckets, so layer l computes while the weights of
// later layers are still gathered and copied in. The host never waits
// for compute except for the loss.
//
// NodeAnyFailed votes with a one-byte max all-reduce on the comm stream (a
// single-rank node answers without NCCL); the host waits for that byte.
//
// Numerics: fp32 (no TF32); NCCL sums in its own order, so results match
// the CPU backend within tolerance, not bit for bit.
// Thread safety: one thread per backend; one backend per GPU.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "worker/backend.h"
#include "zerostate/v1/config.pb.h"

namespace zerostate::worker::cuda {

struct CudaBackendOptions {
  v1::MlpConfig model;      // normalized
  Layout layout;            // LayoutOf the job (tensors as Mlp::Tensors())
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  uint32_t max_batch = 1;   // largest micro-batch ForwardBackward will get
  int device = -1;          // -1: local_rank
  std::string nccl_id;      // NewNcclId() of local rank 0, the same on every local rank
  // The job's wire dtypes (JobSpec.grad_dtype, weight_dtype): BF16 is
  // converted on the device, so the host side of the collectives holds
  // BF16 (Backend::grad_staging, weight_staging); others are staged as FP32.
  v1::DType grad_dtype = v1::DTYPE_FP32;
  v1::DType weight_dtype = v1::DTYPE_FP32;
};

// A fresh NCCL unique id (local rank 0 creates it and shares it, e.g. by
// Client::Rendezvous). Errors: INTERNAL from NCCL.
[[nodiscard]] absl::StatusOr<std::string> NewNcclId();

// Errors: INTERNAL naming the failing CUDA/cuBLAS/NCCL call (no GPU, out
// of memory, NCCL init), INVALID_ARGUMENT for a bad nccl_id.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(
    const CudaBackendOptions& options);

// The number of CUDA devices (0 when there is no GPU or driver).
int DeviceCount();

}  // namespace zerostate::worker::cuda
