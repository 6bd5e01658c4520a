#include "worker/cuda/mlp_kernels.h"

namespace zerostate::worker::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluC = 0.7978845608028654f;
constexpr float kGeluA = 0.044715f;

__device__ float Act(float z, int act) {
  if (act == 1) return 0.5f * z * (1.0f + tanhf(kGeluC * (z + kGeluA * z * z * z)));
  if (act == 2) return z > 0.0f ? z : 0.0f;
  return z;
}

__device__ float ActGrad(float z, int act) {
  if (act == 2) return z > 0.0f ? 1.0f : 0.0f;
  float t = tanhf(kGeluC * (z + kGeluA * z * z * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * z * z);
}

__global__ void BiasActivationKernel(float* z, float* a, const float* bias, uint64_t n, uint32_t out, int act) {
  uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  float v = z[i] + bias[i % out];
  z[i] = v;
  a[i] = Act(v, act);
}

__global__ void ActivationGradKernel(float* d, const float* z, uint64_t n, int act) {
  uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) d[i] *= ActGrad(z[i], act);
}

__global__ void MseGradKernel(const float* out, const float* y, float* d, float* sq, uint64_t n, float k) {
  uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  float diff = out[i] - y[i];
  d[i] = 2.0f * diff * k;
  sq[i] = diff * diff;
}

__global__ void BiasGradKernel(float* gb, const float* d, uint32_t batch, uint32_t out) {
  uint32_t o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float acc = 0.0f;
  for (uint32_t b = 0; b < batch; ++b) acc += d[uint64_t{b} * out + o];
  gb[o] += acc;
}

// common/convert.cc's FloatToBf16, on the bits.
__global__ void EncodeBf16Kernel(const float* src, uint16_t* dst, uint64_t n) {
  uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  uint32_t x = __float_as_uint(src[i]);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    dst[i] = static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return;
  }
  x += 0x7fffu + ((x >> 16) & 1u);
  dst[i] = static_cast<uint16_t>(x >> 16);
}

__global__ void DecodeBf16Kernel(const uint16_t* src, float* dst, uint64_t n) {
  uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
}

unsigned Blocks(uint64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t BiasActivation(float* z, float* a, const float* bias, uint32_t batch, uint32_t out,
                           int act, cudaStream_t stream) {
  uint64_t n = uint64_t{batch} * out;
  BiasActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(z, a, bias, n, out, act);
  return cudaGetLastError();
}

cudaError_t ActivationGrad(float* d, const float* z, uint64_t n, int act, cudaStream_t stream) {
  ActivationGradKernel<<<Blocks(n), kThreads, 0, stream>>>(d, z, n, act);
  return cudaGetLastError();
}

cudaError_t MseGrad(const float* out, const float* y, float* d, float* sq, uint64_t n, float scale,
                    cudaStream_t stream) {
  MseGradKernel<<<Blocks(n), kThreads, 0, stream>>>(out, y, d, sq, n, scale / static_cast<float>(n));
  return cudaGetLastError();
}

cudaError_t BiasGrad(float* gb, const float* d, uint32_t batch, uint32_t out, cudaStream_t stream) {
  BiasGradKernel<<<Blocks(out), kThreads, 0, stream>>>(gb, d, batch, out);
  return cudaGetLastError();
}

cudaError_t EncodeBf16(const float* src, uint16_t* dst, uint64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;  // no launch of zero blocks
  EncodeBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t DecodeBf16(const uint16_t* src, float* dst, uint64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DecodeBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

}  // namespace zerostate::worker::cuda
