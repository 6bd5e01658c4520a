// path_dma.h with the CUDA runtime: cudaHostAlloc'd staging, one stream
// per direction (the GPU's copy engines run both at once), blocking sync so
// that a waiting thread sleeps instead of spinning on a core the CPU stages
// need.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "bench/step/path_dma.h"

namespace zerostate::bench {
namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

class CudaStaging final : public DmaStaging {
 public:
  explicit CudaStaging(size_t bytes) : bytes_(bytes) {}
  ~CudaStaging() override {
    for (cudaStream_t s : {d2h_, h2d_})
      if (s != nullptr) cudaStreamDestroy(s);
    for (void* p : {host_grad_, host_gather_})
      if (p != nullptr) cudaFreeHost(p);
    for (void* p : {dev_grad_, dev_weights_})
      if (p != nullptr) cudaFree(p);
  }

  absl::Status Open() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
      return absl::UnavailableError("no GPU: no device copies (d2h, h2d)");
    if (auto s = Check(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), "cudaSetDeviceFlags");
        !s.ok())
      return s;
    for (void** p : {&host_grad_, &host_gather_}) {
      if (cudaHostAlloc(p, bytes_, cudaHostAllocDefault) != cudaSuccess)
        return absl::ResourceExhaustedError(absl::StrCat("cudaHostAlloc of ", bytes_, " bytes"));
    }
    for (void** p : {&dev_grad_, &dev_weights_}) {
      if (cudaMalloc(p, bytes_) != cudaSuccess)
        return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of ", bytes_, " bytes"));
      if (auto s = Check(cudaMemset(*p, 0x3c, bytes_), "cudaMemset"); !s.ok()) return s;
    }
    for (cudaStream_t* s : {&d2h_, &h2d_}) {
      if (auto st = Check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
          !st.ok())
        return st;
    }
    return absl::OkStatus();
  }

  void* grad_staging() override { return host_grad_; }
  void* gather_staging() override { return host_gather_; }
  absl::Status CopyD2h(size_t offset, size_t bytes) override {
    return Copy(static_cast<char*>(host_grad_) + offset, static_cast<const char*>(dev_grad_) + offset,
                bytes, cudaMemcpyDeviceToHost, d2h_);
  }
  absl::Status CopyH2d(size_t offset, size_t bytes) override {
    return Copy(static_cast<char*>(dev_weights_) + offset, static_cast<const char*>(host_gather_) + offset,
                bytes, cudaMemcpyHostToDevice, h2d_);
  }

 private:
  absl::Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (auto st = Check(cudaMemcpyAsync(dst, src, bytes, kind, s), "cudaMemcpyAsync"); !st.ok())
      return st;
    return Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  size_t bytes_;
  void* host_grad_ = nullptr;
  void* host_gather_ = nullptr;
  void* dev_grad_ = nullptr;
  void* dev_weights_ = nullptr;
  cudaStream_t d2h_ = nullptr;
  cudaStream_t h2d_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DmaStaging>> DmaStaging::Create(size_t bytes) {
  auto staging = std::make_unique<CudaStaging>(bytes);
  if (auto s = staging->Open(); !s.ok()) return s;
  return staging;
}

}  // namespace zerostate::bench
