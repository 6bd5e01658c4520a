#include "tests/client/reference_model.h"

#include <cstring>

#include "common/convert.h"
#include "common/init.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::testing {

float TestGradient(const Layout& layout, uint32_t node, uint64_t step, uint64_t i) {
  bool inside = false;
  for (const TensorSlot& t : layout.tensors) inside |= i >= t.offset && i < t.offset + t.numel;
  if (!inside) return 0.0f;
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (node + 1) * 0xC2B2AE3D27D4EB4Full ^
               (step + 7) * 0x165667B19E3779F9ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (static_cast<float>(x % 2000001) - 1000000.5f) * 1e-6f;
}

std::vector<float> NodeGradient(const Layout& layout, uint32_t node, uint64_t step) {
  std::vector<float> g(layout.used_elems);
  for (uint64_t i = 0; i < g.size(); ++i) g[i] = TestGradient(layout, node, step, i);
  return g;
}

ReferenceModel::Buffer ReferenceModel::Allocate(uint64_t elems) {
  size_t bytes = (elems * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  std::memset(p, 0, bytes);
  return Buffer(static_cast<float*>(p));
}

ReferenceModel::ReferenceModel(const v1::JobSpec& spec)
    : spec_(spec),
      layout_(LayoutOf(spec)),
      master_(Allocate(layout_.total_elems)),
      m_(Allocate(layout_.total_elems)),
      v_(Allocate(layout_.total_elems)),
      grad_(Allocate(layout_.total_elems)),
      lowp_(reinterpret_cast<uint16_t*>(Allocate(layout_.total_elems / 2 + 1).release())) {
  FillInitialWeights(layout_, spec_.seed(), Range{0, layout_.total_elems}, master_.get());
  if (spec_.weight_dtype() != v1::DTYPE_FP32) {
    EncodeFloats(master_.get(), layout_.total_elems, spec_.weight_dtype(), lowp_.get());
  }
}

void ReferenceModel::Step(uint64_t step, const std::vector<std::vector<float>>& node_grads,
                          float lr, float grad_scale) {
  const uint64_t n = layout_.used_elems;
  std::vector<uint8_t> wire(n * 4);
  std::memset(grad_.get(), 0, layout_.total_elems * sizeof(float));
  for (size_t k = 0; k < node_grads.size(); ++k) {
    EncodeFloats(node_grads[k].data(), n, spec_.grad_dtype(), wire.data());
    if (k == 0) {
      DecodeFloats(wire.data(), n, spec_.grad_dtype(), grad_.get());
    } else {
      AccumulateFloats(wire.data(), n, spec_.grad_dtype(), grad_.get());
    }
  }
  server::StepParams p;
  p.config = spec_.optimizer();
  p.lr = lr;
  p.grad_scale = grad_scale == 0 ? 1.0f : grad_scale;
  p.t = step + 1;
  server::BlockRefs b;
  b.param = master_.get();
  b.m = m_.get();
  b.v = v_.get();
  b.grad = grad_.get();
  b.lowp = spec_.weight_dtype() == v1::DTYPE_FP32 ? nullptr : lowp_.get();
  b.lowp_dtype = spec_.weight_dtype();
  b.n = n;
  server::StepBlock(p, b);
}

std::vector<float> ReferenceModel::GatheredWeights() const {
  std::vector<float> w(layout_.total_elems);
  if (spec_.weight_dtype() == v1::DTYPE_FP32) {
    std::memcpy(w.data(), master_.get(), w.size() * sizeof(float));
  } else {
    DecodeFloats(lowp_.get(), w.size(), spec_.weight_dtype(), w.data());
  }
  return w;
}

}  // namespace zerostate::testing
