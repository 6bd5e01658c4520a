// The element-wise update of each optimizer, written once over the vector
// traits of common/simd_*.h. Each rule is one fixed sequence of fp32
// operations (no FMA), so every ISA gives the same bits.
//
// A rule exposes
//   static constexpr int kMoments;  // moment buffers it uses
//   static F Apply(const Splat<Ops>& k, F p, F g, F* m, F* v);
// which returns the new p and updates *m (and *v); g is the summed gradient
// before grad_scale, k the step's constants in every lane.
#pragma once

#include "server/core/optimizer/kernel_table.h"

namespace zerostate::server::kernels {

// StepConsts broadcast to every lane, once per call.
template <class Ops>
struct Splat {
  using F = typename Ops::F;
  explicit Splat(const StepConsts& c)
      : grad_scale(Ops::Set1(c.grad_scale)),
        lr(Ops::Set1(c.lr)),
        weight_decay(Ops::Set1(c.weight_decay)),
        decay(Ops::Set1(c.decay)),
        beta1(Ops::Set1(c.beta1)),
        one_minus_beta1(Ops::Set1(c.one_minus_beta1)),
        beta2(Ops::Set1(c.beta2)),
        one_minus_beta2(Ops::Set1(c.one_minus_beta2)),
        eps(Ops::Set1(c.eps)),
        step_size(Ops::Set1(c.step_size)),
        inv_bc2_sqrt(Ops::Set1(c.inv_bc2_sqrt)),
        momentum(Ops::Set1(c.momentum)) {}

  F grad_scale, lr, weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps,
      step_size, inv_bc2_sqrt, momentum;
};

// Adam (kDecoupled = false: L2, g += wd * p) and AdamW (kDecoupled = true:
// p *= 1 - lr * wd before the Adam update), with PyTorch's bias correction:
// p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
template <class Ops, bool kDecoupled>
struct AdamRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 2;

  static F Apply(const Splat<Ops>& k, F p, F g, F* m, F* v) {
    g = Ops::Mul(g, k.grad_scale);
    if constexpr (kDecoupled) {
      p = Ops::Mul(p, k.decay);
    } else {
      g = Ops::Add(g, Ops::Mul(k.weight_decay, p));
    }
    *m = Ops::Add(Ops::Mul(k.beta1, *m), Ops::Mul(k.one_minus_beta1, g));
    *v = Ops::Add(Ops::Mul(k.beta2, *v), Ops::Mul(k.one_minus_beta2, Ops::Mul(g, g)));
    const F denom = Ops::Add(Ops::Mul(Ops::Sqrt(*v), k.inv_bc2_sqrt), k.eps);
    return Ops::Sub(p, Ops::Mul(k.step_size, Ops::Div(*m, denom)));
  }
};

// PyTorch SGD with momentum, dampening 0: g += wd * p; buf = momentum * buf
// + g; d = nesterov ? g + momentum * buf : buf; p -= lr * d. A zero buffer
// makes the first step buf = g, as PyTorch's lazily created buffer does.
template <class Ops, bool kNesterov>
struct SgdRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 1;

  static F Apply(const Splat<Ops>& k, F p, F g, F* m, F* /*v*/) {
    g = Ops::Add(Ops::Mul(g, k.grad_scale), Ops::Mul(k.weight_decay, p));
    *m = Ops::Add(Ops::Mul(k.momentum, *m), g);
    const F d = kNesterov ? Ops::Add(g, Ops::Mul(k.momentum, *m)) : *m;
    return Ops::Sub(p, Ops::Mul(k.lr, d));
  }
};

// Lion (Chen et al. 2023): c = b1 * m + (1 - b1) * g;
// p = p * (1 - lr * wd) - lr * sign(c); m = b2 * m + (1 - b2) * g.
// sign(0) = 0; a NaN c gives a NaN p.
template <class Ops>
struct LionRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 1;

  static F Apply(const Splat<Ops>& k, F p, F g, F* m, F* /*v*/) {
    g = Ops::Mul(g, k.grad_scale);
    const F c = Ops::Add(Ops::Mul(k.beta1, *m), Ops::Mul(k.one_minus_beta1, g));
    *m = Ops::Add(Ops::Mul(k.beta2, *m), Ops::Mul(k.one_minus_beta2, g));
    return Ops::Sub(Ops::Mul(p, k.decay), Ops::Mul(k.lr, Ops::Sign(c)));
  }
};

// Not an optimizer: p += g, m and v written back unchanged. It moves the
// bytes of an AdamW step with next to no arithmetic, the memory limit that
// benchmarks hold the real rules against.
template <class Ops>
struct TrafficRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 2;

  static F Apply(const Splat<Ops>& /*k*/, F p, F g, F* /*m*/, F* /*v*/) { return Ops::Add(p, g); }
};

}  // namespace zerostate::server::kernels
