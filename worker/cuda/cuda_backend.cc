#include "worker/cuda/cuda_backend.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "common/timeline.h"
#include "trainer/bucket_plan.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/mlp_kernels.h"

namespace zerostate::worker::cuda {
namespace {

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct HostFree {
  void operator()(float* p) const { cudaFreeHost(p); }
};
using DeviceBuffer = std::unique_ptr<float, DeviceFree>;
using PinnedBuffer = std::unique_ptr<float, HostFree>;

// With the timeline on (common/timeline.h, --timeline), records `what`
// (with `a`) when `stream` reaches this point: a host function the CUDA
// runtime calls once the work queued before it is done (it makes no CUDA
// call, as host functions must not). Off: nothing is queued.
absl::Status MarkOnStream(cudaStream_t stream, const char* what, int64_t a) {
  if (!Timeline::on()) return absl::OkStatus();
  struct Mark {
    const char* what;
    int64_t a;
  };
  auto* mark = new Mark{what, a};
  const cudaError_t e = cudaLaunchHostFunc(
      stream,
      [](void* p) {
        auto* m = static_cast<Mark*>(p);
        Timeline::Record(m->what, m->a);
        delete m;
      },
      mark);
  if (e != cudaSuccess) delete mark;
  return Check(e, "cudaLaunchHostFunc (timeline)");
}

absl::Status AllocDevice(DeviceBuffer* b, uint64_t elems) {
  float* p = nullptr;
  ZS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, std::max<uint64_t>(elems, 1) * sizeof(float)));
  b->reset(p);
  ZS_CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, std::max<uint64_t>(elems, 1) * sizeof(float)));
  return absl::OkStatus();
}

absl::Status AllocPinned(PinnedBuffer* b, uint64_t elems) {
  float* p = nullptr;
  ZS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, std::max<uint64_t>(elems, 1) * sizeof(float)));
  b->reset(p);
  return absl::OkStatus();
}

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : opts_(o) {}
  ~CudaBackend() override;
  absl::Status Init();

  uint32_t local_rank() const override { return opts_.local_rank; }
  uint32_t local_size() const override { return opts_.local_size; }
  absl::Status ZeroGrads() override;
  absl::StatusOr<float> ForwardBackward(const float* x, const float* y, uint32_t batch,
                                        float loss_scale, const GradsReadyFn& ready) override;
  bool SetWeightsNeeded(WeightsNeededFn need) override;
  v1::DType grad_staging() const override { return Staging(opts_.grad_dtype); }
  v1::DType weight_staging() const override { return Staging(opts_.weight_dtype); }
  absl::Status StartReduceScatter(Range bucket, void* host_out) override;
  absl::Status FinishReduceScatter() override;
  absl::Status AllGather(Range bucket, const void* host_in) override;
  absl::Status AllGathersRead() override;
  absl::Status ReadParams(Range elems, float* host) override;
  absl::StatusOr<HostBuffer> AllocHost(uint64_t elems) override;
  absl::StatusOr<HostBuffer> AdoptHost(void* data, uint64_t bytes,
                                       std::shared_ptr<void> keep) override;
  absl::StatusOr<bool> NodeAnyFailed(bool failed) override;

 private:
  static v1::DType Staging(v1::DType wire) { return wire == v1::DTYPE_BF16 ? wire : v1::DTYPE_FP32; }
  // send_ as room for BF16 staging on the device (between NCCL calls).
  uint16_t* half() { return reinterpret_cast<uint16_t*>(send_.get()); }
  int num_layers() const { return static_cast<int>(dims_.size()) - 1; }
  absl::Status InitContext();
  absl::Status InitBuffers();
  absl::Status Forward(uint32_t batch);
  absl::Status BackwardLayer(int l, uint32_t batch);
  absl::Status Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc);

  const CudaBackendOptions opts_;
  std::vector<uint32_t> dims_;
  int act_ = 1;
  std::vector<uint64_t> w_off_, b_off_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  DeviceBuffer params_, grads_, send_, recv_, y_, d_, dn_, sq_;
  std::unique_ptr<uint8_t, DeviceFree> vote_;  // NodeAnyFailed's one byte
  std::vector<DeviceBuffer> z_, a_;
  PinnedBuffer hx_, hy_, hsq_;
  std::vector<cudaEvent_t> layer_done_;
  cudaEvent_t grads_done_ = nullptr, params_ready_ = nullptr;
  cudaEvent_t pending_ = nullptr;  // what the next ReduceScatter waits for
  // Started reduce-scatters, oldest first: each one's event is recorded on
  // comm_ after its copy to the host. Spare events are kept for reuse.
  std::deque<cudaEvent_t> reducing_;
  std::vector<cudaEvent_t> spare_events_;
  WeightsNeededFn need_;  // layer-by-layer landing (Backend::SetWeightsNeeded)
};

CudaBackend::~CudaBackend() {
  if (compute_) cudaStreamSynchronize(compute_);
  if (comm_) cudaStreamSynchronize(comm_);
  for (cudaEvent_t e : layer_done_) cudaEventDestroy(e);
  for (cudaEvent_t e : reducing_) cudaEventDestroy(e);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  if (grads_done_) cudaEventDestroy(grads_done_);
  if (params_ready_) cudaEventDestroy(params_ready_);
  if (nccl_) ncclCommDestroy(nccl_);
  if (cublas_) cublasDestroy(cublas_);
  if (compute_) cudaStreamDestroy(compute_);
  if (comm_) cudaStreamDestroy(comm_);
}

absl::Status CudaBackend::InitContext() {
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(opts_.device >= 0 ? opts_.device : static_cast<int>(opts_.local_rank)));
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  ZS_CUDA_RETURN_IF_ERROR(cublasCreate(&cublas_));
  ZS_CUDA_RETURN_IF_ERROR(cublasSetStream(cublas_, compute_));
  ZS_CUDA_RETURN_IF_ERROR(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));  // no TF32
  if (opts_.nccl_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(absl::StrCat("nccl_id: ", opts_.nccl_id.size(), " bytes, expected ",
                                                   sizeof(ncclUniqueId)));
  }
  ncclUniqueId id;
  std::memcpy(&id, opts_.nccl_id.data(), sizeof(id));
  ZS_CUDA_RETURN_IF_ERROR(ncclCommInitRank(&nccl_, static_cast<int>(opts_.local_size), id,
                                           static_cast<int>(opts_.local_rank)));
  layer_done_.resize(num_layers());
  for (cudaEvent_t& e : layer_done_) ZS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ZS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&grads_done_, cudaEventDisableTiming));
  ZS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&params_ready_, cudaEventDisableTiming));
  ZS_CUDA_RETURN_IF_ERROR(cudaEventRecord(grads_done_, compute_));
  ZS_CUDA_RETURN_IF_ERROR(cudaEventRecord(params_ready_, comm_));
  pending_ = grads_done_;
  return absl::OkStatus();
}

absl::Status CudaBackend::InitBuffers() {
  const uint64_t total = opts_.layout.total_elems;
  const uint64_t slack = uint64_t{opts_.local_size} * kTensorAlignElems;
  const uint64_t batch = opts_.max_batch;
  uint32_t widest = 0;
  for (uint32_t d : dims_) widest = std::max(widest, d);
  for (auto [buf, n] : {std::pair{&params_, total}, {&grads_, total}, {&send_, total + slack},
                        {&recv_, total + slack}, {&y_, batch * dims_.back()}, {&d_, batch * widest},
                        {&dn_, batch * widest}, {&sq_, batch * dims_.back()}}) {
    if (auto s = AllocDevice(buf, n); !s.ok()) return s;
  }
  z_.resize(dims_.size());
  a_.resize(dims_.size());
  for (size_t k = 0; k < dims_.size(); ++k) {
    if (auto s = AllocDevice(&z_[k], batch * dims_[k]); !s.ok()) return s;
    if (auto s = AllocDevice(&a_[k], batch * dims_[k]); !s.ok()) return s;
  }
  uint8_t* vote = nullptr;
  ZS_CUDA_RETURN_IF_ERROR(cudaMalloc(&vote, 1));
  vote_.reset(vote);
  for (auto [buf, n] : {std::pair{&hx_, batch * dims_.front()}, {&hy_, batch * dims_.back()},
                        {&hsq_, batch * dims_.back()}}) {
    if (auto s = AllocPinned(buf, n); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Init() {
  dims_.push_back(opts_.model.input_dim());
  for (uint32_t h : opts_.model.hidden()) dims_.push_back(h);
  dims_.push_back(opts_.model.output_dim());
  act_ = opts_.model.activation() == v1::ACTIVATION_RELU ? 2 : 1;
  for (int l = 0; l < num_layers(); ++l) {
    w_off_.push_back(opts_.layout.tensors[2 * l].offset);
    b_off_.push_back(opts_.layout.tensors[2 * l + 1].offset);
  }
  if (auto s = InitContext(); !s.ok()) return s;
  return InitBuffers();
}

absl::Status CudaBackend::Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                               const float* a, int lda, const float* b, int ldb, float beta, float* c,
                               int ldc) {
  const float one = 1.0f;
  ZS_CUDA_RETURN_IF_ERROR(cublasSgemm(cublas_, ta, tb, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc));
  return absl::OkStatus();
}

absl::Status CudaBackend::ZeroGrads() {
  ZS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads_.get(), 0, opts_.layout.total_elems * sizeof(float), compute_));
  return absl::OkStatus();
}

// Row-major W[out][in] is column-major (in x out); activations [batch][dim]
// are column-major (dim x batch). z' = W'^T a'.
absl::Status CudaBackend::Forward(uint32_t batch) {
  for (int l = 0; l < num_layers(); ++l) {
    const int in = static_cast<int>(dims_[l]), out = static_cast<int>(dims_[l + 1]);
    if (need_) {
      // The engine lands every bucket below the layer's end (AllGather:
      // queued on comm_, each recording params_ready_), so waiting for the
      // last record waits for them all; earlier layers compute meanwhile.
      need_(b_off_[l] + dims_[l + 1]);
      ZS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, params_ready_, 0));
    }
    const float* w = params_.get() + w_off_[l];
    if (auto s = Gemm(CUBLAS_OP_T, CUBLAS_OP_N, out, static_cast<int>(batch), in, w, in, a_[l].get(), in,
                      0.0f, z_[l + 1].get(), out);
        !s.ok()) {
      return s;
    }
    const int act = l + 1 == num_layers() ? 0 : act_;
    ZS_CUDA_RETURN_IF_ERROR(BiasActivation(z_[l + 1].get(), a_[l + 1].get(), params_.get() + b_off_[l],
                                           batch, dims_[l + 1], act, compute_));
    if (auto s = MarkOnStream(compute_, "gpu_forward_layer", l); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::BackwardLayer(int l, uint32_t batch) {
  const int in = static_cast<int>(dims_[l]), out = static_cast<int>(dims_[l + 1]), b = static_cast<int>(batch);
  // dW' (in x out) += a' (in x batch) d'^T (batch x out).
  if (auto s = Gemm(CUBLAS_OP_N, CUBLAS_OP_T, in, out, b, a_[l].get(), in, d_.get(), out, 1.0f,
                    grads_.get() + w_off_[l], in);
      !s.ok()) {
    return s;
  }
  ZS_CUDA_RETURN_IF_ERROR(BiasGrad(grads_.get() + b_off_[l], d_.get(), batch, dims_[l + 1], compute_));
  if (l > 0) {
    // dx' (in x batch) = W' (in x out) d' (out x batch), then through the activation.
    if (auto s = Gemm(CUBLAS_OP_N, CUBLAS_OP_N, in, b, out, params_.get() + w_off_[l], in, d_.get(), out,
                      0.0f, dn_.get(), in);
        !s.ok()) {
      return s;
    }
    ZS_CUDA_RETURN_IF_ERROR(ActivationGrad(dn_.get(), z_[l].get(), uint64_t{batch} * dims_[l], act_, compute_));
    std::swap(d_, dn_);
  }
  ZS_CUDA_RETURN_IF_ERROR(cudaEventRecord(layer_done_[l], compute_));
  return MarkOnStream(compute_, "gpu_backward_layer", l);
}

absl::StatusOr<float> CudaBackend::ForwardBackward(const float* x, const float* y, uint32_t batch,
                                                   float loss_scale, const GradsReadyFn& ready) {
  if (batch > opts_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " > max_batch ", opts_.max_batch));
  }
  const uint64_t nx = uint64_t{batch} * dims_.front(), ny = uint64_t{batch} * dims_.back();
  std::memcpy(hx_.get(), x, nx * sizeof(float));
  std::memcpy(hy_.get(), y, ny * sizeof(float));
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, params_ready_, 0));
  ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a_[0].get(), hx_.get(), nx * 4, cudaMemcpyHostToDevice, compute_));
  ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(y_.get(), hy_.get(), ny * 4, cudaMemcpyHostToDevice, compute_));
  if (auto s = Forward(batch); !s.ok()) return s;
  ZS_CUDA_RETURN_IF_ERROR(MseGrad(a_.back().get(), y_.get(), d_.get(), sq_.get(), ny, loss_scale, compute_));
  ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(hsq_.get(), sq_.get(), ny * 4, cudaMemcpyDeviceToHost, compute_));
  for (int l = num_layers() - 1; l >= 0; --l) {
    if (auto s = BackwardLayer(l, batch); !s.ok()) return s;
  }
  ZS_CUDA_RETURN_IF_ERROR(cudaEventRecord(grads_done_, compute_));
  // Everything is queued: now hand layers on; each reduce-scatter waits for
  // its own layer on the GPU while later layers still compute.
  for (int l = num_layers() - 1; l >= 0 && ready; --l) {
    pending_ = layer_done_[l];
    ready(w_off_[l]);
  }
  pending_ = grads_done_;
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  double loss = 0;
  for (uint64_t i = 0; i < ny; ++i) loss += hsq_.get()[i];
  return static_cast<float>(loss / static_cast<double>(ny));
}

bool CudaBackend::SetWeightsNeeded(WeightsNeededFn need) {
  need_ = std::move(need);
  return true;
}

absl::Status CudaBackend::StartReduceScatter(Range bucket, void* host_out) {
  const uint64_t chunk = trainer::LocalChunk(bucket, opts_.local_size);
  const uint64_t padded = chunk * opts_.local_size;
  const Range share = trainer::LocalShare(bucket, opts_.local_size, opts_.local_rank);
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_, pending_, 0));
  // The share's fp32 sum on the device. One rank: its share is the bucket
  // and the node's sum its own gradient, read in place (NCCL would copy
  // it twice).
  const float* sum = grads_.get() + bucket.begin;
  if (opts_.local_size > 1) {
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(send_.get(), grads_.get() + bucket.begin, bucket.size() * 4,
                                            cudaMemcpyDeviceToDevice, comm_));
    ZS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(send_.get() + bucket.size(), 0, (padded - bucket.size()) * 4, comm_));
    ZS_CUDA_RETURN_IF_ERROR(ncclReduceScatter(send_.get(), recv_.get(), chunk, ncclFloat, ncclSum, nccl_, comm_));
    sum = recv_.get();
  }
  // host_out is the engine's staging from AllocHost: pinned, copied into
  // directly; in BF16 the sum is rounded into send_ (free again: NCCL
  // read it before, on this stream) and half the bytes cross.
  if (grad_staging() == v1::DTYPE_BF16) {
    ZS_CUDA_RETURN_IF_ERROR(EncodeBf16(sum, half(), share.size(), comm_));
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out, half(), share.size() * 2, cudaMemcpyDeviceToHost, comm_));
  } else {
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out, sum, share.size() * 4, cudaMemcpyDeviceToHost, comm_));
  }
  if (auto s = MarkOnStream(comm_, "gpu_d2h", static_cast<int64_t>(bucket.begin)); !s.ok()) return s;
  // The next start reuses send_ and recv_ after this one on the same
  // stream, so only the host needs to wait, for this event.
  cudaEvent_t done = nullptr;
  if (spare_events_.empty()) {
    ZS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = spare_events_.back();
    spare_events_.pop_back();
  }
  if (auto s = Check(cudaEventRecord(done, comm_), "cudaEventRecord(reduce-scatter done)"); !s.ok()) {
    spare_events_.push_back(done);
    return s;
  }
  reducing_.push_back(done);
  return absl::OkStatus();
}

absl::Status CudaBackend::FinishReduceScatter() {
  if (reducing_.empty()) return absl::FailedPreconditionError("FinishReduceScatter: no reduce-scatter started");
  cudaEvent_t done = reducing_.front();
  reducing_.pop_front();
  spare_events_.push_back(done);
  ZS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done));
  return absl::OkStatus();
}

absl::Status CudaBackend::AllGather(Range bucket, const void* host_in) {
  const uint64_t chunk = trainer::LocalChunk(bucket, opts_.local_size);
  const Range share = trainer::LocalShare(bucket, opts_.local_size, opts_.local_rank);
  // host_in is the engine's pinned staging; the engine writes it again
  // only after AllGathersRead.
  // The share's fp32 weights go to `mine`: one rank's share is the bucket,
  // written straight into the parameters; else into recv_ for NCCL. In
  // BF16 half the bytes cross, into send_ (NCCL writes it only after), and
  // are widened on the device.
  float* mine = opts_.local_size == 1 ? params_.get() + bucket.begin : recv_.get();
  if (weight_staging() == v1::DTYPE_BF16) {
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(half(), host_in, share.size() * 2, cudaMemcpyHostToDevice, comm_));
    ZS_CUDA_RETURN_IF_ERROR(DecodeBf16(half(), mine, share.size(), comm_));
  } else {
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mine, host_in, share.size() * 4, cudaMemcpyHostToDevice, comm_));
  }
  if (opts_.local_size > 1) {
    ZS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(recv_.get() + share.size(), 0, (chunk - share.size()) * 4, comm_));
    ZS_CUDA_RETURN_IF_ERROR(ncclAllGather(recv_.get(), send_.get(), chunk, ncclFloat, nccl_, comm_));
    ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_.get() + bucket.begin, send_.get(), bucket.size() * 4,
                                            cudaMemcpyDeviceToDevice, comm_));
  }
  ZS_CUDA_RETURN_IF_ERROR(cudaEventRecord(params_ready_, comm_));
  return MarkOnStream(comm_, "gpu_h2d", static_cast<int64_t>(bucket.begin));
}

// params_ready_ is recorded on comm_ after the last AllGather's copy.
absl::Status CudaBackend::AllGathersRead() {
  ZS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(params_ready_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ReadParams(Range elems, float* host) {
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(comm_));
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  ZS_CUDA_RETURN_IF_ERROR(cudaMemcpy(host, params_.get() + elems.begin, elems.size() * 4, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

// The max over local ranks of one byte (0 or 1) on the comm stream, after
// whatever collectives of the step are still queued there. The byte is set
// by a memset and read back into a local that outlives the synchronize, so
// no host buffer is needed.
absl::StatusOr<bool> CudaBackend::NodeAnyFailed(bool failed) {
  if (opts_.local_size == 1) return failed;  // no one to disagree with
  ZS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(vote_.get(), failed ? 1 : 0, 1, comm_));
  ZS_CUDA_RETURN_IF_ERROR(ncclAllReduce(vote_.get(), vote_.get(), 1, ncclUint8, ncclMax, nccl_, comm_));
  uint8_t any = 0;
  ZS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&any, vote_.get(), 1, cudaMemcpyDeviceToHost, comm_));
  ZS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(comm_));
  return any != 0;
}

absl::StatusOr<HostBuffer> CudaBackend::AllocHost(uint64_t elems) {
  PinnedBuffer pinned;
  if (auto s = AllocPinned(&pinned, elems); !s.ok()) return s;
  return HostBuffer(pinned.release(), [](float* p) { cudaFreeHost(p); });
}

// Pinned in place (cudaHostRegister): the copies of the comm stream go
// straight to and from it, as with cudaMallocHost's memory.
absl::StatusOr<HostBuffer> CudaBackend::AdoptHost(void* data, uint64_t bytes,
                                                  std::shared_ptr<void> keep) {
  ZS_CUDA_RETURN_IF_ERROR(cudaHostRegister(data, bytes, cudaHostRegisterDefault));
  // The deleter lets go of `keep` itself: HostBuffer::reset() runs it but
  // keeps the deleter.
  return HostBuffer(static_cast<float*>(data), [keep = std::move(keep)](float* p) mutable {
    cudaHostUnregister(p);
    keep.reset();
  });
}

}  // namespace

absl::StatusOr<std::string> NewNcclId() {
  ncclUniqueId id;
  ZS_CUDA_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  auto backend = std::make_unique<CudaBackend>(options);
  if (auto s = backend->Init(); !s.ok()) return s;
  return backend;
}

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace zerostate::worker::cuda
