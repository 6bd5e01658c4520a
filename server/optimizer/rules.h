// The element-wise update of each optimizer, written once over the vector
// traits of common/simd_*.h. Each rule is one fixed sequence of fp32
// operations (no FMA), so every ISA gives the same bits.
//
// A rule is built once per call from the step's constants and exposes
//   static constexpr int kMoments;           // moment buffers it uses
//   F Apply(F p, F g, F* m, F* v) const;     // new p; updates *m (and *v)
// where g is the summed gradient before grad_scale.
#pragma once

#include "server/optimizer/kernel_table.h"

namespace zerostate::server::kernels {

// Adam (kDecoupled = false: L2, g += wd * p) and AdamW (kDecoupled = true:
// p *= 1 - lr * wd before the Adam update), with PyTorch's bias correction:
// p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
template <class Ops, bool kDecoupled>
struct AdamRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 2;

  explicit AdamRule(const StepConsts& c)
      : scale(Ops::Set1(c.grad_scale)),
        wd(Ops::Set1(c.weight_decay)),
        decay(Ops::Set1(c.decay)),
        b1(Ops::Set1(c.beta1)),
        omb1(Ops::Set1(c.one_minus_beta1)),
        b2(Ops::Set1(c.beta2)),
        omb2(Ops::Set1(c.one_minus_beta2)),
        step_size(Ops::Set1(c.step_size)),
        inv_bc2_sqrt(Ops::Set1(c.inv_bc2_sqrt)),
        eps(Ops::Set1(c.eps)) {}

  F Apply(F p, F g, F* m, F* v) const {
    g = Ops::Mul(g, scale);
    if constexpr (kDecoupled) {
      p = Ops::Mul(p, decay);
    } else {
      g = Ops::Add(g, Ops::Mul(wd, p));
    }
    *m = Ops::Add(Ops::Mul(b1, *m), Ops::Mul(omb1, g));
    *v = Ops::Add(Ops::Mul(b2, *v), Ops::Mul(omb2, Ops::Mul(g, g)));
    const F denom = Ops::Add(Ops::Mul(Ops::Sqrt(*v), inv_bc2_sqrt), eps);
    return Ops::Sub(p, Ops::Mul(step_size, Ops::Div(*m, denom)));
  }

  F scale, wd, decay, b1, omb1, b2, omb2, step_size, inv_bc2_sqrt, eps;
};

// PyTorch SGD with momentum, dampening 0: g += wd * p; buf = momentum * buf
// + g; d = nesterov ? g + momentum * buf : buf; p -= lr * d. A zero buffer
// makes the first step buf = g, as PyTorch's lazily created buffer does.
template <class Ops, bool kNesterov>
struct SgdRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 1;

  explicit SgdRule(const StepConsts& c)
      : scale(Ops::Set1(c.grad_scale)),
        wd(Ops::Set1(c.weight_decay)),
        momentum(Ops::Set1(c.momentum)),
        lr(Ops::Set1(c.lr)) {}

  F Apply(F p, F g, F* m, F* /*v*/) const {
    g = Ops::Add(Ops::Mul(g, scale), Ops::Mul(wd, p));
    *m = Ops::Add(Ops::Mul(momentum, *m), g);
    const F d = kNesterov ? Ops::Add(g, Ops::Mul(momentum, *m)) : *m;
    return Ops::Sub(p, Ops::Mul(lr, d));
  }

  F scale, wd, momentum, lr;
};

// Lion (Chen et al. 2023): c = b1 * m + (1 - b1) * g;
// p = p * (1 - lr * wd) - lr * sign(c); m = b2 * m + (1 - b2) * g.
// sign(0) = 0; a NaN c gives a NaN p.
template <class Ops>
struct LionRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 1;

  explicit LionRule(const StepConsts& c)
      : scale(Ops::Set1(c.grad_scale)),
        decay(Ops::Set1(c.decay)),
        lr(Ops::Set1(c.lr)),
        b1(Ops::Set1(c.beta1)),
        omb1(Ops::Set1(c.one_minus_beta1)),
        b2(Ops::Set1(c.beta2)),
        omb2(Ops::Set1(c.one_minus_beta2)) {}

  F Apply(F p, F g, F* m, F* /*v*/) const {
    g = Ops::Mul(g, scale);
    const F c = Ops::Add(Ops::Mul(b1, *m), Ops::Mul(omb1, g));
    *m = Ops::Add(Ops::Mul(b2, *m), Ops::Mul(omb2, g));
    return Ops::Sub(Ops::Mul(p, decay), Ops::Mul(lr, Ops::Sign(c)));
  }

  F scale, decay, lr, b1, omb1, b2, omb2;
};

// Not an optimizer: p += g, m and v written back unchanged. It moves the
// bytes of an AdamW step with next to no arithmetic, the memory limit that
// benchmarks hold the real rules against.
template <class Ops>
struct TrafficRule {
  using F = typename Ops::F;
  static constexpr int kMoments = 2;

  explicit TrafficRule(const StepConsts&) {}
  F Apply(F p, F g, F* /*m*/, F* /*v*/) const { return Ops::Add(p, g); }
};

}  // namespace zerostate::server::kernels
