#include "worker/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerostate::worker {
namespace {

constexpr int kLanes = 16;

// kLanes floats as one vector of GCC/clang's vector extension (as many
// instructions as the ISA needs), loaded and stored unaligned.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float)), aligned(4), may_alias));

// The kernels of a layer work on up to kRows rows of the batch at once, so
// that a weight row is read once for them rather than once per sample.
// Each keeps the summation order of the one-row loops (a dot product:
// kLanes running sums folded pairwise; a sum into one row: the rows in
// order), so the results are the same bits as one row at a time, and as on
// any ISA (-ffp-contract=off: no fused multiply-adds).
constexpr uint32_t kRows = 8;

// out[r] = the dot product of w and x + r * stride, n elements, r < rows.
[[gnu::always_inline]] inline void DotRowsBody(const float* __restrict w,
                                               const float* __restrict x, size_t stride,
                                               uint32_t rows, uint32_t n, float* __restrict out) {
  for (uint32_t r0 = 0; r0 < rows; r0 += kRows) {
    const uint32_t m = std::min(kRows, rows - r0);
    Lanes acc[kRows] = {};
    uint32_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const Lanes wv = *reinterpret_cast<const Lanes*>(w + i);
      for (uint32_t r = 0; r < m; ++r) {
        acc[r] += wv * *reinterpret_cast<const Lanes*>(x + (r0 + r) * stride + i);
      }
    }
    for (uint32_t r = 0; r < m; ++r) {
      float a[kLanes];
      std::memcpy(a, &acc[r], sizeof a);
      const float* xr = x + (r0 + r) * stride;
      for (uint32_t j = i, l = 0; j < n; ++j, ++l) a[l] += w[j] * xr[j];
      for (int h = kLanes / 2; h >= 1; h /= 2) {
        for (int l = 0; l < h; ++l) a[l] += a[l + h];
      }
      out[r0 + r] = a[0];
    }
  }
}

// y[i] += c[r * c_stride] * (x + r * x_stride)[i] for r = 0, 1, ... rows - 1
// in turn, i < n.
[[gnu::always_inline]] inline void AxpyIntoBody(float* __restrict y, const float* __restrict c,
                                                size_t c_stride, const float* __restrict x,
                                                size_t x_stride, uint32_t rows, uint32_t n) {
  for (uint32_t r0 = 0; r0 < rows; r0 += kRows) {
    const uint32_t m = std::min(kRows, rows - r0);
    uint32_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      Lanes v = *reinterpret_cast<const Lanes*>(y + i);
      for (uint32_t r = 0; r < m; ++r) {
        v += c[(r0 + r) * c_stride] * *reinterpret_cast<const Lanes*>(x + (r0 + r) * x_stride + i);
      }
      *reinterpret_cast<Lanes*>(y + i) = v;
    }
    for (; i < n; ++i) {
      for (uint32_t r = 0; r < m; ++r) y[i] += c[(r0 + r) * c_stride] * x[(r0 + r) * x_stride + i];
    }
  }
}

// (y + r * y_stride)[i] += c[r * c_stride] * x[i] for r < rows, i < n.
[[gnu::always_inline]] inline void AxpyFromBody(float* __restrict y, size_t y_stride,
                                                const float* __restrict c, size_t c_stride,
                                                const float* __restrict x, uint32_t rows,
                                                uint32_t n) {
  for (uint32_t r0 = 0; r0 < rows; r0 += kRows) {
    const uint32_t m = std::min(kRows, rows - r0);
    uint32_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const Lanes xv = *reinterpret_cast<const Lanes*>(x + i);
      for (uint32_t r = 0; r < m; ++r) {
        Lanes* yr = reinterpret_cast<Lanes*>(y + (r0 + r) * y_stride + i);
        *yr += c[(r0 + r) * c_stride] * xv;
      }
    }
    for (; i < n; ++i) {
      for (uint32_t r = 0; r < m; ++r) y[(r0 + r) * y_stride + i] += c[(r0 + r) * c_stride] * x[i];
    }
  }
}

// Each kernel built for AVX-512, AVX2 and the baseline, chosen once by
// the CPU (same bits on all: see above).
struct LayerKernels {
  void (*dot_rows)(const float*, const float*, size_t, uint32_t, uint32_t, float*);
  void (*axpy_into)(float*, const float*, size_t, const float*, size_t, uint32_t, uint32_t);
  void (*axpy_from)(float*, size_t, const float*, size_t, const float*, uint32_t, uint32_t);
};

#define ZS_MLP_KERNELS(NAME, TARGET)                                                           \
  TARGET void DotRows##NAME(const float* w, const float* x, size_t stride, uint32_t rows,      \
                            uint32_t n, float* out) {                                          \
    DotRowsBody(w, x, stride, rows, n, out);                                                   \
  }                                                                                            \
  TARGET void AxpyInto##NAME(float* y, const float* c, size_t cs, const float* x, size_t xs,   \
                             uint32_t rows, uint32_t n) {                                      \
    AxpyIntoBody(y, c, cs, x, xs, rows, n);                                                    \
  }                                                                                            \
  TARGET void AxpyFrom##NAME(float* y, size_t ys, const float* c, size_t cs, const float* x,   \
                             uint32_t rows, uint32_t n) {                                      \
    AxpyFromBody(y, ys, c, cs, x, rows, n);                                                    \
  }
ZS_MLP_KERNELS(Avx512, [[gnu::target("avx512f")]])
ZS_MLP_KERNELS(Avx2, [[gnu::target("avx2")]])
ZS_MLP_KERNELS(Base, )
#undef ZS_MLP_KERNELS

const LayerKernels& Kernels() {
  static const LayerKernels kernels = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
      return LayerKernels{DotRowsAvx512, AxpyIntoAvx512, AxpyFromAvx512};
    }
    if (__builtin_cpu_supports("avx2")) return LayerKernels{DotRowsAvx2, AxpyIntoAvx2, AxpyFromAvx2};
    return LayerKernels{DotRowsBase, AxpyIntoBase, AxpyFromBase};
  }();
  return kernels;
}

// Rows of a layer's weight between the forward's calls of `need` and the
// backward's of `ready` (tens of microseconds of compute each on one core
// for an 8192-wide layer): a large layer's weights land, and its gradient
// leaves, a bucket at a time while the rest of it is computed.
constexpr uint32_t kRowsPerReport = 64;

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

float Gelu(float z) {
  float t = std::tanh(kGeluC * (z + kGeluA * z * z * z));
  return 0.5f * z * (1.0f + t);
}

float GeluGrad(float z) {
  float t = std::tanh(kGeluC * (z + kGeluA * z * z * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * z * z);
}

}  // namespace

Mlp::Mlp(const v1::MlpConfig& config) : relu_(config.activation() == v1::ACTIVATION_RELU) {
  dims_.push_back(config.input_dim());
  for (uint32_t h : config.hidden()) dims_.push_back(h);
  dims_.push_back(config.output_dim());
  z_.resize(dims_.size());
  a_.resize(dims_.size());
}

std::vector<v1::TensorSpec> Mlp::Tensors() const {
  std::vector<v1::TensorSpec> out;
  for (int l = 0; l < num_layers(); ++l) {
    v1::TensorSpec w;
    w.set_name(absl::StrCat("fc", l, ".weight"));
    w.add_shape(dims_[l + 1]);
    w.add_shape(dims_[l]);
    v1::TensorSpec b;
    b.set_name(absl::StrCat("fc", l, ".bias"));
    b.add_shape(dims_[l + 1]);
    out.push_back(std::move(w));
    out.push_back(std::move(b));
  }
  return out;
}

void Mlp::Bind(const Layout& layout) {
  weight_offset_.clear();
  bias_offset_.clear();
  for (int l = 0; l < num_layers(); ++l) {
    weight_offset_.push_back(layout.tensors[2 * l].offset);
    bias_offset_.push_back(layout.tensors[2 * l + 1].offset);
  }
}

uint64_t Mlp::MacsPerSample() const {
  uint64_t macs = 0;
  for (int l = 0; l < num_layers(); ++l) macs += uint64_t{dims_[l]} * dims_[l + 1];
  return macs;
}

void Mlp::Forward(const float* params, const float* x, uint32_t batch, const WeightsNeededFn& need) {
  a_[0].assign(x, x + size_t{batch} * dims_[0]);
  for (int l = 0; l < num_layers(); ++l) {
    const uint32_t in = dims_[l], out = dims_[l + 1];
    const float* w = params + weight_offset_[l];
    const float* bias = params + bias_offset_[l];
    auto& z = z_[l + 1];
    z.resize(size_t{batch} * out);
    float dots[kRows];
    // The weight rows as they land (the bias lies after them), the bias
    // added last: bias[o] + dot, the same bits as at once.
    for (uint32_t o = 0; o < out; ++o) {
      if (need && o % kRowsPerReport == 0) {
        need(weight_offset_[l] + uint64_t{std::min(o + kRowsPerReport, out)} * in);
      }
      for (uint32_t b0 = 0; b0 < batch; b0 += kRows) {
        const uint32_t m = std::min(kRows, batch - b0);
        Kernels().dot_rows(w + size_t{o} * in, a_[l].data() + size_t{b0} * in, in, m, in, dots);
        for (uint32_t b = 0; b < m; ++b) z[size_t{b0 + b} * out + o] = dots[b];
      }
    }
    if (need) need(bias_offset_[l] + out);
    for (uint32_t b = 0; b < batch; ++b) {
      for (uint32_t o = 0; o < out; ++o) z[size_t{b} * out + o] = bias[o] + z[size_t{b} * out + o];
    }
    auto& a = a_[l + 1];
    a.resize(z.size());
    bool last = l + 1 == num_layers();
    for (size_t i = 0; i < z.size(); ++i) {
      a[i] = last ? z[i] : (relu_ ? std::max(z[i], 0.0f) : Gelu(z[i]));
    }
  }
}

float Mlp::OutputGrad(const float* y, uint32_t batch, float loss_scale) {
  const auto& out = a_.back();
  const float inv = 1.0f / static_cast<float>(out.size());
  d_.resize(out.size());
  double loss = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    float diff = out[i] - y[i];
    loss += static_cast<double>(diff) * diff;
    d_[i] = 2.0f * diff * inv * loss_scale;
  }
  return static_cast<float>(loss / static_cast<double>(out.size()));
}

// d_ holds dLoss/dz of layer l's output; adds layer l's parameter gradients
// and leaves dLoss/dz of its input in d_ (for l > 0). The bias first, then
// the weight rows from the last down, `ready` (if any) told of each
// finished part (the bias lies after the weights): a large layer's
// gradient leaves a bucket at a time while the rest is computed. Each
// element's sum is in the same order as row by row, so the same bits.
void Mlp::BackwardLayer(int l, const float* params, uint32_t batch, float* grads,
                        const GradsReadyFn& ready, bool overwrite) {
  const uint32_t in = dims_[l], out = dims_[l + 1];
  const float* w = params + weight_offset_[l];
  float* gw = grads + weight_offset_[l];
  float* gb = grads + bias_offset_[l];
  const LayerKernels& k = Kernels();
  // `overwrite`: each row is zeroed right before its sum, while in cache,
  // not the whole buffer in a pass of its own (the same bits).
  if (overwrite) std::fill_n(gb, out, 0.0f);
  for (uint32_t o = 0; o < out; ++o) {
    for (uint32_t b = 0; b < batch; ++b) gb[o] += d_[size_t{b} * out + o];
  }
  for (uint32_t o = out; o-- > 0;) {
    if (overwrite) std::fill_n(gw + size_t{o} * in, in, 0.0f);
    k.axpy_into(gw + size_t{o} * in, d_.data() + o, out, a_[l].data(), in, batch, in);
    if (ready && o % kRowsPerReport == 0) ready(weight_offset_[l] + uint64_t{o} * in);
  }
  if (l == 0) return;
  d_next_.assign(size_t{batch} * in, 0.0f);
  for (uint32_t o = 0; o < out; ++o) {
    k.axpy_from(d_next_.data(), in, d_.data() + o, out, w + size_t{o} * in, batch, in);
  }
  const auto& z = z_[l];
  for (size_t i = 0; i < d_next_.size(); ++i) {
    d_next_[i] *= relu_ ? (z[i] > 0.0f ? 1.0f : 0.0f) : GeluGrad(z[i]);
  }
  d_.swap(d_next_);
}

float Mlp::ForwardBackward(const float* params, const float* x, const float* y, uint32_t batch,
                           float loss_scale, float* grads, const GradsReadyFn& ready,
                           const WeightsNeededFn& need, bool overwrite) {
  Forward(params, x, batch, need);
  float loss = OutputGrad(y, batch, loss_scale);
  for (int l = num_layers() - 1; l >= 0; --l) {
    BackwardLayer(l, params, batch, grads, ready, overwrite);
  }
  return loss;
}

float Mlp::Loss(const float* params, const float* x, const float* y, uint32_t batch) {
  Forward(params, x, batch);
  return OutputGrad(y, batch, 0.0f);
}

}  // namespace zerostate::worker
