// The single pass of a step and of the gradient statistics, written once
// over the vector traits of common/simd_*.h; kernels_<isa>.cc instantiate
// them into a KernelTable. Include only what the ISA files may include.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "server/core/optimizer/kernel_table.h"
#include "server/core/optimizer/moment_codec.h"
#include "server/core/optimizer/rules.h"

namespace zerostate::server::kernels {

// kGradBf16: the gradient is read as bf16 (StepBuffers::grad_bf16, one
// node's push where it landed) and widened in registers, exactly as a fold
// into an fp32 sum would have widened it; else fp32 (grad).
template <class Ops, class RuleT, Lowp kLowp, bool kGradBf16 = false>
struct StepLoop {
  using F = typename Ops::F;
  static constexpr size_t W = Ops::kWidth;
  static constexpr int kMoments = RuleT::kMoments;

  // Elements [i, i + W) of the gradient, as fp32. Buffers: StepBuffers or
  // CompactBuffers.
  template <class Buffers>
  [[gnu::always_inline]] static F LoadGrad(const Buffers& b, size_t i) {
    if constexpr (kGradBf16) {
      return Ops::FromBf16(Ops::LoadHalf(b.grad_bf16 + i));
    } else {
      return Ops::Load(b.grad + i);
    }
  }
  // The gradient's address at element i, for prefetching.
  template <class Buffers>
  [[gnu::always_inline]] static const void* GradAt(const Buffers& b, size_t i) {
    if constexpr (kGradBf16) {
      return b.grad_bf16 + i;
    } else {
      return b.grad + i;
    }
  }
  // The gradient's elements [i, i + n) into g (fp32) or gh (bf16), and the
  // buffers' gradient pointers at them.
  template <class Buffers>
  static void CopyGrad(const Buffers& from, size_t i, size_t n, float* g, uint16_t* gh,
                       Buffers* to) {
    if constexpr (kGradBf16) {
      std::memcpy(gh, from.grad_bf16 + i, n * sizeof(uint16_t));
      to->grad_bf16 = gh;
    } else {
      std::memcpy(g, from.grad + i, n * sizeof(float));
      to->grad = g;
    }
  }

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
    const F p = RuleT::Apply(k, Ops::Load(b.from_param + i), LoadGrad(b, i), &m, &v);
    StoreState<kStreamState>(b.param + i, p);
    if constexpr (kMoments >= 1) StoreState<kStreamState>(b.m + i, m);
    if constexpr (kMoments >= 2) StoreState<kStreamState>(b.v + i, v);
    StoreLowp(b.lowp, i, p, stream);
  }

  // The low-precision copy of p at lowp + i, when the job has one (else
  // lowp is null).
  [[gnu::always_inline]] static void StoreLowp(uint16_t* lowp, size_t i, F p, bool stream) {
    if constexpr (kLowp != Lowp::kNone) {
      const auto h = kLowp == Lowp::kBf16 ? Ops::ToBf16(p) : Ops::ToFp16(p);
      if (stream) {
        Ops::StreamHalf(lowp + i, h);
      } else {
        Ops::StoreHalf(lowp + i, h);
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
    alignas(64) uint16_t lowp[W] = {}, gh[W] = {};
    StepBuffers t{p, m, v, nullptr, lowp, W, p, m, v};
    const size_t n = b.n - i;
    std::memcpy(p, b.from_param + i, n * sizeof(float));
    CopyGrad(b, i, n, g, gh, &t);
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
    __builtin_prefetch(GradAt(b, i));
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

// One moment's codes in and out of a quantization block's fp32 copy.
// `kSecond`: the second moment (the unsigned map for int8).
template <class Ops, MomentFormat kFormat, bool kSecond>
struct MomentCodec {
  static constexpr size_t W = Ops::kWidth;

  // Codes of elements [t, t + n) (scale q = t / kQuantBlock) into x[0, n).
  // x has room for a whole number of vectors past n.
  static void Decode(const void* codes, const float* scales, size_t t, size_t n, float* x) {
    if constexpr (kFormat == MomentFormat::kFp32) {
      std::memcpy(x, static_cast<const float*>(codes) + t, n * sizeof(float));
    } else if constexpr (kFormat == MomentFormat::kBf16) {
      const uint16_t* h = static_cast<const uint16_t*>(codes) + t;
      size_t i = 0;
      for (; i + W <= n; i += W) Ops::Store(x + i, Ops::FromBf16(Ops::LoadHalf(h + i)));
      alignas(64) uint16_t tail[W] = {};
      std::memcpy(tail, h + i, (n - i) * sizeof(uint16_t));
      if (i < n) Ops::Store(x + i, Ops::FromBf16(Ops::LoadHalf(tail)));
    } else {
      DequantizeVec<Ops>(Map(), static_cast<const uint8_t*>(codes) + t, n,
                         scales[t / kQuantBlock], x);
    }
  }

  static void Encode(const float* x, size_t t, size_t n, void* codes, float* scales) {
    if constexpr (kFormat == MomentFormat::kFp32) {
      std::memcpy(static_cast<float*>(codes) + t, x, n * sizeof(float));
    } else if constexpr (kFormat == MomentFormat::kBf16) {
      uint16_t* h = static_cast<uint16_t*>(codes) + t;
      size_t i = 0;
      for (; i + W <= n; i += W) Ops::StoreHalf(h + i, Ops::ToBf16(Ops::Load(x + i)));
      if (i < n) {
        alignas(64) uint16_t tail[W];
        Ops::StoreHalf(tail, Ops::ToBf16(Ops::Load(x + i)));
        std::memcpy(h + i, tail, (n - i) * sizeof(uint16_t));
      }
    } else {
      scales[t / kQuantBlock] =
          QuantizeVec<Ops>(Map(), x, n, static_cast<uint8_t*>(codes) + t);
    }
  }

  static const QuantMap& Map() { return kSecond ? UnsignedMap() : SignedMap(); }
};

// The step with compact moments. bf16: one vector pass, the moments widened
// as they are loaded and rounded as they are stored (Bf16Part). int8: for
// each quantization block (kQuantBlock elements), each run's part is stepped
// with its moments decoded as they are loaded, the new moments kept in fp32
// tiles that stay in L1 (Int8Part), and the tiles are encoded back. The
// master, the gradient and the low-precision copy are read and written
// once, in place, as in the fp32 step; every ISA does the same fp32
// operations, so the bits agree.
template <class Ops, class RuleT, Lowp kLowp, MomentFormat kFormat, bool kGradBf16 = false>
struct CompactLoop {
  using Loop = StepLoop<Ops, RuleT, kLowp, kGradBf16>;
  using MCodec = MomentCodec<Ops, kFormat, false>;
  using VCodec = MomentCodec<Ops, kFormat, true>;
  static constexpr int kMoments = RuleT::kMoments;

  static void Run(const StepRun* runs, size_t count, const CompactBuffers& buffers) {
    CompactBuffers b = buffers;
    if (b.from_param == nullptr) {
      b.from_param = b.param;
      b.from_m = b.m;
      b.from_v = b.v;
      b.from_m_scale = b.m_scale;
      b.from_v_scale = b.v_scale;
    }
    const bool stream =
        kLowp != Lowp::kNone && reinterpret_cast<uintptr_t>(b.lowp) % sizeof(typename Ops::H) == 0;
    if constexpr (kFormat == MomentFormat::kBf16) {
      for (size_t j = 0; j < count; ++j) Bf16Part(runs[j].c, b, runs[j].begin, runs[j].end, stream);
      if (stream) Ops::Fence();
      return;
    }
    // Two pairs of tiles: block t steps into one while the block before it
    // is encoded from the other, a vector of each moment per vector stepped
    // (the encoding's integer work overlaps the rule's division and square
    // root), and whatever is left once block t is stepped.
    // The four tiles kPad apart: the encoder's loads from one do not share
    // their address's low 12 bits with the step's stores into another at
    // the same offset (4K aliasing: a load waits on a store it only seems
    // to depend on).
    constexpr size_t kPad = 64;
    alignas(64) float tile_mem[4 * (kQuantBlock + kPad)];
    const auto tile = [&](int parity, int moment) {
      return tile_mem + (2 * parity + moment) * (kQuantBlock + kPad);
    };
    BlockEncoder<Ops, true> prev_m;
    BlockEncoder<Ops, false> prev_v;
    size_t r = 0;
    int parity = 0;
    for (size_t t = 0; t < b.n; t += kQuantBlock, parity ^= 1) {
      const size_t n = b.n - t < kQuantBlock ? b.n - t : kQuantBlock;
      float* m = tile(parity, 0);
      float* v = tile(parity, 1);
      AbsMaxAcc<Ops> am, av;
      while (r < count && runs[r].end <= t) ++r;
      for (size_t j = r; j < count && runs[j].begin < t + n; ++j) {
        const size_t lo = runs[j].begin > t ? runs[j].begin : t;
        const size_t hi = runs[j].end < t + n ? runs[j].end : t + n;
        Int8Part(runs[j].c, b, t, lo, hi, m, v, stream, &prev_m, &prev_v, &am, &av);
      }
      prev_m.Finish();
      prev_v.Finish();
      const size_t q = t / kQuantBlock;
      if constexpr (kMoments >= 1) {
        b.m_scale[q] = am.Value();
        prev_m = BlockEncoder<Ops, true>(m, n, b.m_scale[q], static_cast<uint8_t*>(b.m) + t);
      }
      if constexpr (kMoments >= 2) {
        b.v_scale[q] = av.Value();
        prev_v = BlockEncoder<Ops, false>(v, n, b.v_scale[q], static_cast<uint8_t*>(b.v) + t);
      }
    }
    prev_m.Finish();
    prev_v.Finish();
    if (stream) Ops::Fence();
  }

  // Whether the traits round two vectors to bf16 at once (ToBf16Pair,
  // StoreBf16Pair: simd_avx512_bf16.h).
  static constexpr bool kHasPair = requires(typename Ops::F x) { Ops::ToBf16Pair(x, x); };
  static constexpr bool kPairedCopy = kLowp == Lowp::kBf16 && kHasPair;

  // Whether the copy streams for a part from lo: where pairs of vectors of
  // it are stored at once (64 bytes), only from a 64-byte boundary.
  static bool StreamFrom(const CompactBuffers& b, size_t lo, bool stream) {
    return stream && (!kPairedCopy || reinterpret_cast<uintptr_t>(b.lowp + lo) % 64 == 0);
  }

  // bf16 moments need no tile: each vector of them is widened as it is
  // loaded and rounded as it is stored (the same conversions as Decode and
  // Encode), in one pass over elements [lo, hi); two vectors at a time
  // where the traits round pairs.
  static void Bf16Part(const StepConsts& c, const CompactBuffers& b, size_t lo, size_t hi,
                       bool stream) {
    if (StreamFrom(b, lo, stream)) {
      Bf16Loop<true>(c, b, lo, hi);
    } else {
      Bf16Loop<false>(c, b, lo, hi);
    }
  }

  template <bool kStream>
  static void Bf16Loop(const StepConsts& c, const CompactBuffers& b, size_t lo, size_t hi) {
    constexpr size_t W = Ops::kWidth;
    const Splat<Ops> k(c);
    size_t i = lo;
    if constexpr (kHasPair) {
      for (; i + 2 * W <= hi; i += 2 * W) {
        if (i + W + Loop::kAhead < hi) {
          Bf16Prefetch(b, i + Loop::kAhead);
          __builtin_prefetch(b.from_param + i + W + Loop::kAhead);
          __builtin_prefetch(Loop::GradAt(b, i + W + Loop::kAhead));
        }
        Bf16Chunk2<kStream>(k, b, i);
      }
    }
    for (; i + Loop::kLine <= hi; i += Loop::kLine) {
      if (i + Loop::kAhead < hi) Bf16Prefetch(b, i + Loop::kAhead);
      for (size_t j = 0; j < Loop::kLine; j += W) Bf16Chunk(k, b, i + j, kStream);
    }
    for (; i + W <= hi; i += W) Bf16Chunk(k, b, i, kStream);
    if (i < hi) Bf16Tail(k, b, i, hi - i);
  }

  // Elements [i, i + W): the moments widened, stepped into *m and *v, the
  // master stored; returns it.
  [[gnu::always_inline]] static typename Ops::F Bf16Step(const Splat<Ops>& k,
                                                         const CompactBuffers& b, size_t i,
                                                         typename Ops::F* m, typename Ops::F* v) {
    const auto* from_m = static_cast<const uint16_t*>(b.from_m);
    const auto* from_v = static_cast<const uint16_t*>(b.from_v);
    *m = *v = Ops::Set1(0);
    if constexpr (kMoments >= 1) *m = Ops::FromBf16(Ops::LoadHalf(from_m + i));
    if constexpr (kMoments >= 2) *v = Ops::FromBf16(Ops::LoadHalf(from_v + i));
    const auto p = RuleT::Apply(k, Ops::Load(b.from_param + i), Loop::LoadGrad(b, i), m, v);
    Ops::Store(b.param + i, p);
    return p;
  }

  static void Bf16Chunk(const Splat<Ops>& k, const CompactBuffers& b, size_t i, bool stream) {
    typename Ops::F m, v;
    const auto p = Bf16Step(k, b, i, &m, &v);
    if constexpr (kMoments >= 1) Ops::StoreHalf(static_cast<uint16_t*>(b.m) + i, Ops::ToBf16(m));
    if constexpr (kMoments >= 2) Ops::StoreHalf(static_cast<uint16_t*>(b.v) + i, Ops::ToBf16(v));
    Loop::StoreLowp(b.lowp, i, p, stream);
  }

  // Elements [i, i + 2 W), each stream of bf16 rounded and stored a pair of
  // vectors at once.
  template <bool kStream>
  [[gnu::always_inline]] static void Bf16Chunk2(const Splat<Ops>& k, const CompactBuffers& b,
                                                size_t i) {
    constexpr size_t W = Ops::kWidth;
    typename Ops::F m0, v0, m1, v1;
    const auto p0 = Bf16Step(k, b, i, &m0, &v0);
    const auto p1 = Bf16Step(k, b, i + W, &m1, &v1);
    if constexpr (kMoments >= 1) {
      Ops::template StoreBf16Pair<false>(static_cast<uint16_t*>(b.m) + i, m0, m1);
    }
    if constexpr (kMoments >= 2) {
      Ops::template StoreBf16Pair<false>(static_cast<uint16_t*>(b.v) + i, v0, v1);
    }
    StoreLowp2<kStream>(b.lowp, i, p0, p1);
  }

  // The copy of two vectors of the master at lowp + i.
  template <bool kStream>
  [[gnu::always_inline]] static void StoreLowp2(uint16_t* lowp, size_t i, typename Ops::F p0,
                                                typename Ops::F p1) {
    if constexpr (kPairedCopy) {
      Ops::template StoreBf16Pair<kStream>(lowp + i, p0, p1);
    } else {
      Loop::StoreLowp(lowp, i, p0, kStream);
      Loop::StoreLowp(lowp, i + Ops::kWidth, p1, kStream);
    }
  }

  [[gnu::always_inline]] static void Bf16Prefetch(const CompactBuffers& b, size_t i) {
    __builtin_prefetch(b.from_param + i);
    __builtin_prefetch(Loop::GradAt(b, i));
    if constexpr (kMoments >= 1) __builtin_prefetch(static_cast<const uint16_t*>(b.from_m) + i);
    if constexpr (kMoments >= 2) __builtin_prefetch(static_cast<const uint16_t*>(b.from_v) + i);
  }

  // The last n < kWidth elements from i, through zero-padded copies.
  static void Bf16Tail(const Splat<Ops>& k, const CompactBuffers& b, size_t i, size_t n) {
    constexpr size_t W = Ops::kWidth;
    alignas(64) float p[W] = {}, g[W] = {};
    alignas(64) uint16_t m[W] = {}, v[W] = {}, lowp[W] = {}, gh[W] = {};
    std::memcpy(p, b.from_param + i, n * sizeof(float));
    if constexpr (kMoments >= 1) std::memcpy(m, static_cast<const uint16_t*>(b.from_m) + i, n * 2);
    if constexpr (kMoments >= 2) std::memcpy(v, static_cast<const uint16_t*>(b.from_v) + i, n * 2);
    CompactBuffers t;
    Loop::CopyGrad(b, i, n, g, gh, &t);
    t.param = p;
    t.m = m;
    t.v = v;
    t.lowp = lowp;
    t.from_param = p;
    t.from_m = m;
    t.from_v = v;
    Bf16Chunk(k, t, 0, /*stream=*/false);
    std::memcpy(b.param + i, p, n * sizeof(float));
    if constexpr (kMoments >= 1) std::memcpy(static_cast<uint16_t*>(b.m) + i, m, n * 2);
    if constexpr (kMoments >= 2) std::memcpy(static_cast<uint16_t*>(b.v) + i, v, n * 2);
    if constexpr (kLowp != Lowp::kNone) std::memcpy(b.lowp + i, lowp, n * 2);
  }

  // Elements [lo, hi) of the quantization block from t: each vector's
  // moments decoded as they are loaded (no pass of its own), stepped, stored
  // into the block's fp32 tiles m and v and counted into their max |x| (am,
  // av), and a vector of each moment of the block before encoded (prev_m,
  // prev_v); two vectors at a time (Int8Loop), the last partial vector
  // through the tiles and StepPart. Where the traits convert two vectors of
  // the copy at once (ToBf16Pair: one 64-byte store), the copy streams only
  // from a 64-byte boundary.
  static void Int8Part(const StepConsts& c, const CompactBuffers& b, size_t t, size_t lo,
                       size_t hi, float* m, float* v, bool stream, BlockEncoder<Ops, true>* prev_m,
                       BlockEncoder<Ops, false>* prev_v, AbsMaxAcc<Ops>* am, AbsMaxAcc<Ops>* av) {
    stream = StreamFrom(b, lo, stream);
    const size_t i = stream ? Int8Loop<true>(c, b, t, lo, hi, m, v, prev_m, prev_v, am, av)
                            : Int8Loop<false>(c, b, t, lo, hi, m, v, prev_m, prev_v, am, av);
    if (i < hi) {
      if constexpr (kMoments >= 1) MCodec::Decode(b.from_m, b.from_m_scale, i, hi - i, m + (i - t));
      if constexpr (kMoments >= 2) VCodec::Decode(b.from_v, b.from_v_scale, i, hi - i, v + (i - t));
      StepPart(c, b, i, hi, m + (i - t), v + (i - t), stream);
      if constexpr (kMoments >= 1) am->rest = AbsMaxBits(m + (i - t), hi - i, am->rest);
      if constexpr (kMoments >= 2) av->rest = AbsMaxBits(v + (i - t), hi - i, av->rest);
    }
  }

  // The whole vectors of Int8Part; returns where they end. kStream: the
  // copy's stores are non-temporal (decided once per part, not per vector).
  template <bool kStream>
  static size_t Int8Loop(const StepConsts& c, const CompactBuffers& buffers, size_t t, size_t lo,
                         size_t hi, float* m, float* v, BlockEncoder<Ops, true>* prev_m,
                         BlockEncoder<Ops, false>* prev_v, AbsMaxAcc<Ops>* am,
                         AbsMaxAcc<Ops>* av) {
    using Quant = QuantVec<Ops>;
    using F = typename Ops::F;
    constexpr size_t W = Ops::kWidth;
    // A local copy, as in StepLoop::Run: the vector stores may alias
    // anything a reference points at, which would reload every pointer.
    const CompactBuffers b = buffers;
    const size_t q = t / kQuantBlock;
    const typename Quant::template Decoder<true> dm(kMoments >= 1 ? b.from_m_scale[q] : 0.0f);
    const typename Quant::template Decoder<false> dv(kMoments >= 2 ? b.from_v_scale[q] : 0.0f);
    const Splat<Ops> k(c);
    // Locals, so that they stay in registers across the vector stores.
    BlockEncoder<Ops, true> em = *prev_m;
    BlockEncoder<Ops, false> ev = *prev_v;
    typename Quant::Bits mbits = am->vec, vbits = av->vec;
    // Elements [i, i + W): decoded, stepped, the master stored, the moments
    // into the tiles and their max |x|; returns the new master.
    const auto step = [&](size_t i) __attribute__((always_inline)) {
      // Ahead into the next quantization block too (not bounded by hi): a
      // block whose first lines were not fetched ahead starts with misses.
      // Nor by b.n: a prefetch never faults.
      if (i % Loop::kLine == 0) {
        __builtin_prefetch(b.from_param + i + Loop::kAhead);
        __builtin_prefetch(Loop::GradAt(b, i + Loop::kAhead));
        if (i % 64 == 0) {
          if constexpr (kMoments >= 1) {
            __builtin_prefetch(static_cast<const uint8_t*>(b.from_m) + i + Loop::kAhead);
          }
          if constexpr (kMoments >= 2) {
            __builtin_prefetch(static_cast<const uint8_t*>(b.from_v) + i + Loop::kAhead);
          }
        }
      }
      F mi = Ops::Set1(0), vi = Ops::Set1(0);
      if constexpr (kMoments >= 1) mi = dm.Read(static_cast<const uint8_t*>(b.from_m) + i);
      if constexpr (kMoments >= 2) vi = dv.Read(static_cast<const uint8_t*>(b.from_v) + i);
      const F p = RuleT::Apply(k, Ops::Load(b.from_param + i), Loop::LoadGrad(b, i), &mi, &vi);
      Ops::Store(b.param + i, p);
      if constexpr (kMoments >= 1) {
        Ops::Store(m + (i - t), mi);
        mbits = Quant::MaxAbs(mbits, mi);
      }
      if constexpr (kMoments >= 2) {
        Ops::Store(v + (i - t), vi);
        vbits = Quant::MaxAbs(vbits, vi);
      }
      return p;
    };
    size_t i = lo;
    for (; i + 2 * W <= hi; i += 2 * W) {
      const F p0 = step(i);
      const F p1 = step(i + W);
      if constexpr (kMoments >= 1) em.Next2();
      if constexpr (kMoments >= 2) ev.Next2();
      StoreLowp2<kStream>(b.lowp, i, p0, p1);
    }
    for (; i + W <= hi; i += W) {
      const F p = step(i);
      if constexpr (kMoments >= 1) em.Next();
      if constexpr (kMoments >= 2) ev.Next();
      Loop::StoreLowp(b.lowp, i, p, kStream);
    }
    *prev_m = em;
    *prev_v = ev;
    am->vec = mbits;
    av->vec = vbits;
    return i;
  }

  // Elements [lo, hi) with their moments in the tiles at m and v.
  static void StepPart(const StepConsts& c, const CompactBuffers& b, size_t lo, size_t hi,
                       float* m, float* v, bool stream) {
    StepBuffers part;
    part.param = b.param + lo;
    part.m = m;
    part.v = v;
    if constexpr (kGradBf16) {
      part.grad_bf16 = b.grad_bf16 + lo;
    } else {
      part.grad = b.grad + lo;
    }
    part.lowp = kLowp == Lowp::kNone ? nullptr : b.lowp + lo;
    part.n = hi - lo;
    part.from_param = b.from_param + lo;
    part.from_m = m;
    part.from_v = v;
    Loop::template Loop<false>(Splat<Ops>(c), part, stream);
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

template <class Ops, class RuleT, MomentFormat kFormat, Lowp kLowp, bool kGradBf16>
constexpr CompactStepFn CompactFn() {
  return &CompactLoop<Ops, RuleT, kLowp, kFormat, kGradBf16>::Run;
}

template <class Ops, class RuleT, bool kGradBf16>
constexpr KernelTable::ByLowp ByLowpOf() {
  constexpr MomentFormat kBf16 = MomentFormat::kBf16, kInt8 = MomentFormat::kInt8;
  return {{&StepLoop<Ops, RuleT, Lowp::kNone, kGradBf16>::Run,
           &StepLoop<Ops, RuleT, Lowp::kBf16, kGradBf16>::Run,
           &StepLoop<Ops, RuleT, Lowp::kFp16, kGradBf16>::Run},
          {{CompactFn<Ops, RuleT, kBf16, Lowp::kNone, kGradBf16>(),
            CompactFn<Ops, RuleT, kBf16, Lowp::kBf16, kGradBf16>(),
            CompactFn<Ops, RuleT, kBf16, Lowp::kFp16, kGradBf16>()},
           {CompactFn<Ops, RuleT, kInt8, Lowp::kNone, kGradBf16>(),
            CompactFn<Ops, RuleT, kInt8, Lowp::kBf16, kGradBf16>(),
            CompactFn<Ops, RuleT, kInt8, Lowp::kFp16, kGradBf16>()}}};
}

template <class Ops, class RuleT>
constexpr KernelTable::Row RowOf() {
  return {{ByLowpOf<Ops, RuleT, false>(), ByLowpOf<Ops, RuleT, true>()}};
}

// Rows in the order of enum Rule.
template <class Ops>
constexpr KernelTable MakeKernelTable() {
  return {{RowOf<Ops, AdamRule<Ops, true>>(), RowOf<Ops, AdamRule<Ops, false>>(),
           RowOf<Ops, SgdRule<Ops, false>>(), RowOf<Ops, SgdRule<Ops, true>>(),
           RowOf<Ops, LionRule<Ops>>(), RowOf<Ops, TrafficRule<Ops>>()},
          &GradStatsLoop<Ops>,
          &QuantizeVec<Ops>,
          &DequantizeVec<Ops>};
}

}  // namespace zerostate::server::kernels
