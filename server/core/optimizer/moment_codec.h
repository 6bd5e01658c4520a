// The arithmetic of compact moments, written once in plain C++ so that
// every ISA kernel (and the format conversion of a restore) produces the
// same bits. Plain types only: the ISA files include it.
//
// bf16: round to nearest even (common/convert.h's FloatToBf16, the same
// bits as the kernels' vector conversion), not stochastic rounding. A
// stochastic rounding needs a random stream whose draws would have to be
// the same on every ISA, on every server that replays a step (replicas,
// a restored checkpoint) and in every block order; RNE is a pure function
// of the value, so results stay bit-identical across ISAs and runs.
// Moments are averages over about 1 / (1 - beta) steps, which keeps RNE's
// bias below bf16's own 2^-9 relative step in practice.
//
// int8 (block-wise 8-bit moments as in 8-bit Adam, Dettmers et al. 2021,
// with an 8-bit float map, as torchao's AdamWFp8, in place of the dynamic
// tree map): a quantization block of at most kQuantBlock elements is
// stored as scale = max |x| over the block (fp32) and, per element, an
// 8-bit float of u = x * (1 / scale), |u| <= 1:
//   first moment (signed): sign, 4 exponent bits, 3 mantissa bits; the
//     127 magnitudes 2^-16 * 1.25 ... 1 (16 binades, 8 steps each);
//   second moment (unsigned): 5 exponent bits, 3 mantissa bits; the 255
//     magnitudes 2^-32 * 1.25 ... 1 (32 binades: the second moment is a
//     square and spans twice the range).
// Entry k >= 1 of a map is the float whose bits are base + k * 2^20 (3
// mantissa bits: one entry per 2^20 of fp32 bits), entry 0 is 0. A value
// encodes to the entry nearest its magnitude (ties to the larger), clamped
// to [1, max], and to 0 only where it is below 2^-126 (+-0, denormals: 2^94
// below the smallest entry): a moment the map can hold never decodes to 0
// (a second moment rounded to 0 would divide by eps alone; 4-bit
// optimizers, Li et al. 2023, call it the zero-point problem). In fp32 bits
// that is idx = (|u|bits - base + 2^19) >> 20 (arithmetic), a few integer
// operations instead of a table search, and decoding is
// bits = base + idx * 2^20 (0 for idx 0), the sign or'ed back, times scale.
// The index depends on bits 31..19 of u alone (the rounding adds 2^19 and
// shifts by 20), so the vector encoders code u's top 16 bits, 32 to a
// 512-bit vector: idx = (|u|top - (base >> 16) + 8) >> 4.
// 1 / scale is rounded to fp32 once per block and each element multiplied
// by it; where 1 / scale is not finite (scale below 2^-128, or NaN) the
// block divides, x / scale; a scale of 0 stores every code 0. Every ISA
// follows this rule, so codes agree.
//
// The scale is the block's exact absmax, not a power of two. A power of
// two would make scaling an exponent addition (no multiply either way), but
// it fixes the grid: a second moment that decays by beta2 = 0.999 a step
// moves less than half a step of 3 mantissa bits and rounds back to where
// it was, where the absmax carries the block's common decay in its fp32
// scale (examples/gpt on the CPU, 200 steps: 13% above fp32's loss with
// power-of-two scales, within 0.1% with the absmax; the power-of-two
// kernels took 42 vector instructions per 16 elements, these 49).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerostate::server::kernels {

// One moment's 8-bit float map (see above).
struct QuantMap {
  bool is_signed;
  uint32_t base;   // entry k >= 1 has the bits base + (k << kMantissaShift)
  int32_t max;     // the largest magnitude index: 127 or 255 (its entry is 1)
};
inline constexpr int kMantissaShift = 20;  // 23 - 3 mantissa bits
inline constexpr uint32_t kOneBits = 0x3f800000u;
inline constexpr QuantMap kSignedMap{true, kOneBits - (127u << kMantissaShift), 127};
inline constexpr QuantMap kUnsignedMap{false, kOneBits - (255u << kMantissaShift), 255};
// Added to |u|'s bits before the shift: rounds to nearest, ties up.
inline constexpr uint32_t kHalfStep = 1u << (kMantissaShift - 1);

// The maps of the first (signed) and second (unsigned) moments.
inline const QuantMap& SignedMap() { return kSignedMap; }
inline const QuantMap& UnsignedMap() { return kUnsignedMap; }
template <bool kSigned>
constexpr const QuantMap& MapFor() {
  return kSigned ? kSignedMap : kUnsignedMap;
}

inline uint32_t FloatBits(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}

// The magnitude (fp32 bits) from which a value encodes to a nonzero code:
// 2^-126, the smallest normal float.
inline constexpr uint32_t kMinNormalBits = 0x00800000u;

// The code of x (already scaled).
inline uint8_t QuantizeUnit(const QuantMap& map, float x) {
  const uint32_t bits = FloatBits(x), u = bits & 0x7fffffffu;
  int32_t idx = static_cast<int32_t>(u - map.base + kHalfStep) >> kMantissaShift;
  idx = idx < 1 ? 1 : idx > map.max ? map.max : idx;
  if (u < kMinNormalBits) idx = 0;
  const uint32_t sign = map.is_signed ? (bits >> 31) << 7 : 0;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(idx));
}

// The unscaled value of a code: +-0 for magnitude index 0.
inline float MapValue(const QuantMap& map, uint8_t code) {
  const uint32_t idx = map.is_signed ? code & 0x7fu : code;
  const uint32_t sign = map.is_signed ? static_cast<uint32_t>(code >> 7) << 31 : 0;
  return BitsFloat(sign | (idx == 0 ? 0 : map.base + (idx << kMantissaShift)));
}

// Whether a block scales by its reciprocal scale `inv` (else it divides).
inline bool ReciprocalIsFinite(float inv) {
  return (FloatBits(inv) & 0x7f800000u) != 0x7f800000u;
}

// max |x[i]| over [0, n) as the largest magnitude's bits: for floats that
// are not NaN the integer order is the numeric order, and an integer max
// reduction vectorizes (a float one would not, for NaN's sake).
inline uint32_t AbsMaxBits(const float* x, size_t n, uint32_t bits = 0) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = FloatBits(x[i]) & 0x7fffffffu;
    bits = u > bits ? u : bits;
  }
  return bits;
}

// Encodes x[0, n) (n <= kQuantBlock), whose max |x| is `absmax`, into codes
// and returns the scale (absmax).
inline float QuantizeScaled(const QuantMap& map, const float* x, size_t n, float absmax,
                            uint8_t* codes) {
  if (absmax == 0) {
    for (size_t i = 0; i < n; ++i) codes[i] = 0;
    return 0;
  }
  const float inv = 1.0f / absmax;
  if (ReciprocalIsFinite(inv)) {
    for (size_t i = 0; i < n; ++i) codes[i] = QuantizeUnit(map, x[i] * inv);
  } else {
    for (size_t i = 0; i < n; ++i) codes[i] = QuantizeUnit(map, x[i] / absmax);
  }
  return absmax;
}

inline float QuantizeBlock(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
  return QuantizeScaled(map, x, n, BitsFloat(AbsMaxBits(x, n)), codes);
}

inline void DequantizeBlock(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                            float* x) {
  for (size_t i = 0; i < n; ++i) x[i] = MapValue(map, codes[i]) * scale;
}

// The vector primitives of the int8 codec for an ISA's traits `Ops`; this
// plain version (one element at a time) serves the scalar kernels, and
// quant_avx2.h and quant_avx512.h specialize it. Every version does the same
// operations on every element as QuantizeUnit and MapValue, so the same
// bits:
//   Bits, NoBits, MaxAbs, Reduce: a running max |x| as fp32 bits;
//   Encoder<kSigned>(inv).Store(codes, x): the codes of x[0, kWidth) * inv
//     by MapFor<kSigned>() (REQUIRES: |x * inv| <= 1 + 2^-23, as in
//     BlockEncoder's vector path);
//   Decoder<kSigned>(scale).Read(codes): kWidth values of codes[0, kWidth).
// Build encoders and decoders once per block, outside the loop.
template <class Ops>
struct QuantVec {
  using Bits = uint32_t;
  static Bits NoBits() { return 0; }
  static Bits MaxAbs(Bits acc, float x) { return AbsMaxBits(&x, 1, acc); }
  static uint32_t Reduce(Bits acc) { return acc; }

  template <bool kSigned>
  struct Encoder {
    explicit Encoder(float inv_scale) : inv(inv_scale) {}
    void Store(uint8_t* codes, const float* x) const {
      codes[0] = QuantizeUnit(MapFor<kSigned>(), x[0] * inv);
    }
    float inv;
  };

  template <bool kSigned>
  struct Decoder {
    explicit Decoder(float s) : scale(s) {}
    float Read(const uint8_t* codes) const { return MapValue(MapFor<kSigned>(), codes[0]) * scale; }
    float scale;
  };
};

// max |x| over a block: whole vectors by MaxAbs, the rest one by one.
template <class Ops>
struct AbsMaxAcc {
  typename QuantVec<Ops>::Bits vec = QuantVec<Ops>::NoBits();
  uint32_t rest = 0;
  float Value() const {
    const uint32_t v = QuantVec<Ops>::Reduce(vec);
    return BitsFloat(v > rest ? v : rest);
  }
};

// The encoding of one quantization block x[0, n) whose max |x| is absmax
// into codes by MapFor<kSigned>(), a vector at a time (Next) or all that is
// left (Finish): Next lets a step encode the block before the one it steps,
// in the same loop. A scale of 0 or one whose reciprocal is not finite
// encodes in Finish, by QuantizeScaled. Default-constructed: nothing to
// encode.
template <class Ops, bool kSigned>
class BlockEncoder {
  static constexpr size_t W = Ops::kWidth;
  using Enc = typename QuantVec<Ops>::template Encoder<kSigned>;

 public:
  BlockEncoder() : BlockEncoder(nullptr, 0, 0.0f, nullptr) {}
  BlockEncoder(const float* x, size_t n, float absmax, uint8_t* codes)
      : x_(x), codes_(codes), n_(n), absmax_(absmax), inv_(1.0f / absmax), enc_(inv_) {
    // A finite absmax bounds every |x| of the block, so every x * inv is
    // at most 1 + 2^-23 and its index at most the map's max: the vector
    // encoders need not clamp from above (Store2 does not). An infinite or
    // NaN absmax takes QuantizeScaled, the same bits.
    vector_ = absmax != 0 && (FloatBits(absmax) & 0x7f800000u) != 0x7f800000u &&
              ReciprocalIsFinite(inv_);
    end_ = vector_ ? n / W * W : 0;
  }

  [[gnu::always_inline]] void Next() {
    if (done_ < end_) {
      enc_.Store(codes_ + done_, x_ + done_);
      done_ += W;
    }
  }

  // Two vectors' worth: by the encoder's Store2 where it has one (32
  // codes at once), else as Next twice.
  [[gnu::always_inline]] void Next2() {
    if constexpr (requires(const Enc& e, uint8_t* c, const float* x) { e.Store2(c, x); }) {
      if (__builtin_expect(done_ + 2 * W <= end_, 1)) {
        enc_.Store2(codes_ + done_, x_ + done_);
        done_ += 2 * W;
        return;
      }
    }
    Next();
    Next();
  }

  void Finish() {
    const QuantMap& map = MapFor<kSigned>();
    if (!vector_) {
      QuantizeScaled(map, x_, n_, absmax_, codes_);
    } else {
      while (done_ + 2 * W <= end_) Next2();  // the step's code path, here too
      for (; done_ < end_; done_ += W) enc_.Store(codes_ + done_, x_ + done_);
      for (size_t i = end_; i < n_; ++i) codes_[i] = QuantizeUnit(map, x_[i] * inv_);
    }
    n_ = end_ = done_ = 0;
    vector_ = false;
  }

 private:
  const float* x_;
  uint8_t* codes_;
  size_t n_;
  float absmax_;
  float inv_;
  Enc enc_;
  bool vector_ = false;
  size_t end_ = 0;   // the vectors' end
  size_t done_ = 0;  // elements encoded
};

// QuantizeBlock and DequantizeBlock with the primitives of `Ops`.
template <class Ops, bool kSigned>
float QuantizeVecOf(const float* x, size_t n, uint8_t* codes) {
  using Q = QuantVec<Ops>;
  AbsMaxAcc<Ops> acc;
  size_t i = 0;
  for (; i + Ops::kWidth <= n; i += Ops::kWidth) acc.vec = Q::MaxAbs(acc.vec, Ops::Load(x + i));
  acc.rest = AbsMaxBits(x + i, n - i);
  const float absmax = acc.Value();
  BlockEncoder<Ops, kSigned>(x, n, absmax, codes).Finish();
  return absmax;
}

template <class Ops>
float QuantizeVec(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
  return map.is_signed ? QuantizeVecOf<Ops, true>(x, n, codes)
                       : QuantizeVecOf<Ops, false>(x, n, codes);
}

template <class Ops, bool kSigned>
void DequantizeVecOf(const uint8_t* codes, size_t n, float scale, float* x) {
  const typename QuantVec<Ops>::template Decoder<kSigned> d(scale);
  size_t i = 0;
  for (; i + Ops::kWidth <= n; i += Ops::kWidth) Ops::Store(x + i, d.Read(codes + i));
  DequantizeBlock(MapFor<kSigned>(), codes + i, n - i, scale, x + i);
}

template <class Ops>
void DequantizeVec(const QuantMap& map, const uint8_t* codes, size_t n, float scale, float* x) {
  return map.is_signed ? DequantizeVecOf<Ops, true>(codes, n, scale, x)
                       : DequantizeVecOf<Ops, false>(codes, n, scale, x);
}

}  // namespace zerostate::server::kernels
