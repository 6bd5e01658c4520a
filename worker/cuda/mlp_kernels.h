// Element-wise CUDA kernels of the built-in MLP (the GEMMs are cuBLAS).
// Each launches on `stream` and returns the launch error.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zerostate::worker::cuda {

// z[b][o] += bias[o]; a = act(z) (identity when `act` is 0, 1 GELU, 2 ReLU).
cudaError_t BiasActivation(float* z, float* a, const float* bias, uint32_t batch, uint32_t out,
                           int act, cudaStream_t stream);

// d[i] *= act'(z[i]) for n elements.
cudaError_t ActivationGrad(float* d, const float* z, uint64_t n, int act, cudaStream_t stream);

// diff = out - y; d = 2 * diff / n * scale; sq = diff^2, for n elements.
cudaError_t MseGrad(const float* out, const float* y, float* d, float* sq, uint64_t n, float scale,
                    cudaStream_t stream);

// gb[o] += sum over b (in order) of d[b][o].
cudaError_t BiasGrad(float* gb, const float* d, uint32_t batch, uint32_t out, cudaStream_t stream);

// dst[i] = bf16 of src[i] for n elements, bit for bit as common/convert.h's
// FloatToBf16 (round to nearest even on the bits, NaN made quiet).
cudaError_t EncodeBf16(const float* src, uint16_t* dst, uint64_t n, cudaStream_t stream);

// dst[i] = src[i] widened (exact), for n elements.
cudaError_t DecodeBf16(const uint16_t* src, float* dst, uint64_t n, cudaStream_t stream);

}  // namespace zerostate::worker::cuda
