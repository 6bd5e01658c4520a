#include "worker/mlp.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace zerostate::worker {
namespace {

constexpr int kLanes = 16;

// A dot product with a fixed summation order: kLanes running sums folded
// pairwise, so the compiler can vectorise it without reassociating.
float Dot(const float* __restrict a, const float* __restrict b, uint32_t n) {
  float acc[kLanes] = {};
  uint32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

// y[i] += alpha * x[i].
void Axpy(float* __restrict y, float alpha, const float* __restrict x, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

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
    if (need) need(bias_offset_[l] + out);
    const float* w = params + weight_offset_[l];
    const float* bias = params + bias_offset_[l];
    auto& z = z_[l + 1];
    z.resize(size_t{batch} * out);
    for (uint32_t o = 0; o < out; ++o) {
      for (uint32_t b = 0; b < batch; ++b) {
        z[size_t{b} * out + o] = bias[o] + Dot(w + size_t{o} * in, a_[l].data() + size_t{b} * in, in);
      }
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
// and leaves dLoss/dz of its input in d_ (for l > 0).
void Mlp::BackwardLayer(int l, const float* params, uint32_t batch, float* grads) {
  const uint32_t in = dims_[l], out = dims_[l + 1];
  const float* w = params + weight_offset_[l];
  float* gw = grads + weight_offset_[l];
  float* gb = grads + bias_offset_[l];
  for (uint32_t o = 0; o < out; ++o) {
    for (uint32_t b = 0; b < batch; ++b) {
      float d = d_[size_t{b} * out + o];
      Axpy(gw + size_t{o} * in, d, a_[l].data() + size_t{b} * in, in);
      gb[o] += d;
    }
  }
  if (l == 0) return;
  d_next_.assign(size_t{batch} * in, 0.0f);
  for (uint32_t o = 0; o < out; ++o) {
    for (uint32_t b = 0; b < batch; ++b) {
      Axpy(d_next_.data() + size_t{b} * in, d_[size_t{b} * out + o], w + size_t{o} * in, in);
    }
  }
  const auto& z = z_[l];
  for (size_t i = 0; i < d_next_.size(); ++i) {
    d_next_[i] *= relu_ ? (z[i] > 0.0f ? 1.0f : 0.0f) : GeluGrad(z[i]);
  }
  d_.swap(d_next_);
}

float Mlp::ForwardBackward(const float* params, const float* x, const float* y, uint32_t batch,
                           float loss_scale, float* grads, const GradsReadyFn& ready,
                           const WeightsNeededFn& need) {
  Forward(params, x, batch, need);
  float loss = OutputGrad(y, batch, loss_scale);
  for (int l = num_layers() - 1; l >= 0; --l) {
    BackwardLayer(l, params, batch, grads);
    if (ready) ready(weight_offset_[l]);
  }
  return loss;
}

float Mlp::Loss(const float* params, const float* x, const float* y, uint32_t batch) {
  Forward(params, x, batch);
  return OutputGrad(y, batch, 0.0f);
}

}  // namespace zerostate::worker
