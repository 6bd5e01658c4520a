// The single pass of a step and of the gradient statistics, written once
// over the vector traits of common/simd_*.h; kernels_<isa>.cc instantiate
// them into a KernelTable. Include only what the ISA files may include.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "server/core/optimizer/kernel_table.h"
#include "server/core/optimizer/rules.h"

namespace zerostate::server::kernels {

template <class Ops, class RuleT, Lowp kLowp>
struct StepLoop {
  using F = typename Ops::F;
  static constexpr size_t W = Ops::kWidth;
  static constexpr int kMoments = RuleT::kMoments;

  // Reads and writes elements [i, i + W) of every buffer the rule uses, once:
  // the state from from_*, the new state to param, m and v (`kStreamState`:
  // with non-temporal stores, for an out-of-place step whose destination
  // is not read first). `stream`: write the low-precision copy with
  // non-temporal stores (it is not read again by this pass; saves reading
  // its lines in first).
  template <bool kStreamState>
  static void Chunk(const Splat<Ops>& k, const StepBuffers& b, size_t i, bool stream) {
    F m = Ops::Set1(0), v = Ops::Set1(0);
    if constexpr (kMoments >= 1) m = Ops::Load(b.from_m + i);
    if constexpr (kMoments >= 2) v = Ops::Load(b.from_v + i);
    const F p = RuleT::Apply(k, Ops::Load(b.from_param + i), Ops::Load(b.grad + i), &m, &v);
    StoreState<kStreamState>(b.param + i, p);
    if constexpr (kMoments >= 1) StoreState<kStreamState>(b.m + i, m);
    if constexpr (kMoments >= 2) StoreState<kStreamState>(b.v + i, v);
    if constexpr (kLowp != Lowp::kNone) {
      const auto h = kLowp == Lowp::kBf16 ? Ops::ToBf16(p) : Ops::ToFp16(p);
      if (stream) {
        Ops::StreamHalf(b.lowp + i, h);
      } else {
        Ops::StoreHalf(b.lowp + i, h);
      }
    }
  }

  template <bool kStream>
  [[gnu::always_inline]] static void StoreState(float* p, F x) {
    if constexpr (kStream) {
      Ops::Stream(p, x);
    } else {
      Ops::Store(p, x);
    }
  }

  // The last partial chunk [i, n), through zero-padded copies so it takes
  // the vector path too.
  static void Tail(const Splat<Ops>& k, const StepBuffers& b, size_t i) {
    alignas(64) float p[W] = {}, m[W] = {}, v[W] = {}, g[W] = {};
    alignas(64) uint16_t lowp[W] = {};
    const StepBuffers t{p, m, v, g, lowp, W, p, m, v};
    const size_t n = b.n - i;
    std::memcpy(p, b.from_param + i, n * sizeof(float));
    std::memcpy(g, b.grad + i, n * sizeof(float));
    if constexpr (kMoments >= 1) std::memcpy(m, b.from_m + i, n * sizeof(float));
    if constexpr (kMoments >= 2) std::memcpy(v, b.from_v + i, n * sizeof(float));
    Chunk<false>(k, t, 0, /*stream=*/false);
    std::memcpy(b.param + i, p, n * sizeof(float));
    if constexpr (kMoments >= 1) std::memcpy(b.m + i, m, n * sizeof(float));
    if constexpr (kMoments >= 2) std::memcpy(b.v + i, v, n * sizeof(float));
    if constexpr (kLowp != Lowp::kNone) std::memcpy(b.lowp + i, lowp, n * sizeof(uint16_t));
  }

  // Software prefetch, one cache line per stream, this many elements ahead.
  // The hardware prefetcher alone leaves the arithmetic-heavy rules short of
  // the memory limit (about 10% slower in an A/B run of optimizer_bench).
  static constexpr size_t kLine = 16;  // floats per 64-byte cache line
  static constexpr size_t kAhead = 256;
  static_assert(kLine % W == 0);

  // always_inline: __builtin_prefetch has no side effects in GCC's eyes, so
  // an out-of-line Prefetch is "const" and its calls are deleted as dead.
  [[gnu::always_inline]] static void Prefetch(const StepBuffers& b, size_t i) {
    __builtin_prefetch(b.from_param + i);
    __builtin_prefetch(b.grad + i);
    if constexpr (kMoments >= 1) __builtin_prefetch(b.from_m + i);
    if constexpr (kMoments >= 2) __builtin_prefetch(b.from_v + i);
  }

  template <bool kStreamState>
  static void Loop(const Splat<Ops>& k, const StepBuffers& b, bool stream) {
    size_t i = 0;
    for (; i + kLine <= b.n; i += kLine) {
      if (i + kAhead < b.n) Prefetch(b, i + kAhead);
      for (size_t j = 0; j < kLine; j += W) Chunk<kStreamState>(k, b, i + j, stream);
    }
    for (; i + W <= b.n; i += W) Chunk<kStreamState>(k, b, i, stream);
    if (i < b.n) Tail(k, b, i);
  }

  static bool Aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % sizeof(F) == 0;
  }

  static void Run(const StepConsts& c, const StepBuffers& buffers) {
    // A local copy: the vector stores may alias anything (__m256i and kin
    // are may_alias types), which would reload every pointer after each.
    StepBuffers b = buffers;
    const bool in_place = b.from_param == nullptr;
    if (in_place) {
      b.from_param = b.param;
      b.from_m = b.m;
      b.from_v = b.v;
    }
    const Splat<Ops> k(c);
    const bool stream =
        kLowp != Lowp::kNone && reinterpret_cast<uintptr_t>(b.lowp) % sizeof(typename Ops::H) == 0;
    const bool stream_state = !in_place && Aligned(b.param) &&
                              (kMoments < 1 || Aligned(b.m)) && (kMoments < 2 || Aligned(b.v));
    if (stream_state) {
      Loop<true>(k, b, stream);
    } else {
      Loop<false>(k, b, stream);
    }
    // The new state and copy are complete before the caller publishes them.
    if (stream || stream_state) Ops::Fence();
  }
};

// Element i of the buffer into lane i % 16, in order of i. A partial group
// (the first, when lanes->elems is not a multiple of 16; the last) is added
// as a whole one with zeros elsewhere, which add +0.0 to a lane: no change.
template <class Ops>
void GradStatsLoop(const float* g, size_t n, SquareLanes* lanes) {
  typename Ops::SquareSums sums = Ops::LoadSquares(lanes->lane);
  uint64_t nonfinite = 0;
  const size_t lane = lanes->elems % 16;
  size_t i = 0;
  if (lane != 0 && n > 0) {
    float t[16] = {};
    i = n < 16 - lane ? n : 16 - lane;
    std::memcpy(t + lane, g, i * sizeof(float));
    nonfinite += Ops::AddSquares16(&sums, t);
  }
  for (; i + 16 <= n; i += 16) nonfinite += Ops::AddSquares16(&sums, g + i);
  if (i < n) {
    float t[16] = {};
    std::memcpy(t, g + i, (n - i) * sizeof(float));
    nonfinite += Ops::AddSquares16(&sums, t);
  }
  Ops::SpillSquares(sums, lanes->lane);
  lanes->nonfinite += nonfinite;
  lanes->elems += n;
}

template <class Ops, class RuleT>
constexpr KernelTable::Row RowOf() {
  return {{&StepLoop<Ops, RuleT, Lowp::kNone>::Run, &StepLoop<Ops, RuleT, Lowp::kBf16>::Run,
           &StepLoop<Ops, RuleT, Lowp::kFp16>::Run}};
}

// Rows in the order of enum Rule.
template <class Ops>
constexpr KernelTable MakeKernelTable() {
  return {{RowOf<Ops, AdamRule<Ops, true>>(), RowOf<Ops, AdamRule<Ops, false>>(),
           RowOf<Ops, SgdRule<Ops, false>>(), RowOf<Ops, SgdRule<Ops, true>>(),
           RowOf<Ops, LionRule<Ops>>(), RowOf<Ops, TrafficRule<Ops>>()},
          &GradStatsLoop<Ops>};
}

}  // namespace zerostate::server::kernels
