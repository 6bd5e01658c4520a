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
// stored as one fp32 scale and, per element, the code of an 8-bit float
// u with |u| <= 1, the value being u * scale:
//   first moment (signed): sign, 4 exponent bits, 3 mantissa bits; the
//     127 magnitudes 2^-16 * 1.25 ... 1 (16 binades, 8 steps each);
//   second moment (unsigned): 5 exponent bits, 3 mantissa bits; the 255
//     magnitudes 2^-32 * 1.25 ... 1 (32 binades: the second moment is a
//     square and spans twice the range).
// Entry k >= 1 of a map is the float whose bits are base + k * 2^20 (3
// mantissa bits: one entry per 2^20 of fp32 bits), entry 0 is 0. Decoding
// is MapValue(code) * scale, whatever the scale (a checkpoint written
// before power-of-two scales decodes as it did).
//
// Encoding (QuantizeTop) picks a power of two for the scale, as the OCP MX
// formats' shared exponents do: the map being a float map, its relative
// precision is the same at every scale, and a power of two makes x / scale
// an exponent subtraction and code * scale an exponent addition, exact, in
// integer arithmetic (no multiply either way). Per element it needs only
// the top 16 bits of x (sign, exponent, 7 mantissa bits: rounding to 3
// mantissa bits, ties up, looks at no lower bit), so the kernels keep a
// block's new moments as 16-bit halves until they encode it:
//   T = the largest |x| of the block, rounded to the map's 3 mantissa bits
//       (ties up);
//   scale = 2^e, the smallest power of two >= T (e in [-126, 127]);
//   code = the entry nearest |x| / scale (ties to the larger), clamped to
//       [1, max], or 0 where |x| < 2^-126 (zeros and denormals), with the
//       sign in bit 7 for the first moment. A normal moment never decodes
//       to 0 (a second moment rounded to 0 would divide by eps alone;
//       4-bit optimizers, Li et al. 2023, call it the zero-point problem).
// In bits: idx = (h - (e << 7) + 8 - (base >> 16)) >> 4 (arithmetic) with
// h = |x|'s top 16 bits. Rounding T first makes the encoding idempotent:
// decoding a block and encoding it again gives the same scale and codes.
// A block whose T is below 2^-126 stores scale 0 (all codes 0); one whose
// T is above 2^127, infinite or NaN (a diverged state) stores T itself and
// codes of x / T (QuantizeUnit), one element at a time. Every ISA follows
// these rules, so codes agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "server/core/optimizer/state_layout.h"

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

// The code of x (already scaled).
inline uint8_t QuantizeUnit(const QuantMap& map, float x) {
  const uint32_t bits = FloatBits(x), u = bits & 0x7fffffffu;
  int32_t idx = static_cast<int32_t>(u - map.base + kHalfStep) >> kMantissaShift;
  idx = idx < 1 ? 1 : idx > map.max ? map.max : idx;
  if (u == 0) idx = 0;
  const uint32_t sign = map.is_signed ? (bits >> 31) << 7 : 0;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(idx));
}

// The unscaled value of a code, the entries' bits from `base` (the map's
// base; or the map's base plus e << 23, which is the value times 2^e where
// that is normal: ExactBase): +-0 for magnitude index 0.
inline float MapValueAt(const QuantMap& map, uint32_t base, uint8_t code) {
  const uint32_t idx = map.is_signed ? code & 0x7fu : code;
  const uint32_t sign = map.is_signed ? static_cast<uint32_t>(code >> 7) << 31 : 0;
  return BitsFloat(sign | (idx == 0 ? 0 : base + (idx << kMantissaShift)));
}
inline float MapValue(const QuantMap& map, uint8_t code) {
  return MapValueAt(map, map.base, code);
}

// Whether a block scales by its reciprocal scale `inv` (else it divides).
inline bool ReciprocalIsFinite(float inv) {
  return (FloatBits(inv) & 0x7f800000u) != 0x7f800000u;
}

// The top 16 bits of x (sign, exponent, 7 mantissa bits).
inline uint16_t TopHalf(float x) { return static_cast<uint16_t>(FloatBits(x) >> 16); }
inline constexpr uint16_t kTopMagnitude = 0x7fff;
inline constexpr uint16_t kTopExponent = 0x7f80;
inline constexpr uint16_t kTopMinNormal = 0x0080;  // 2^-126
inline constexpr uint16_t kTopMaxScale = 0x7f00;   // 2^127

// How a block encodes, from T, the largest top half of |x| (0 to 0x7fff).
struct BlockScale {
  enum Kind { kZero, kPow2, kOther } kind;
  int e;           // kPow2: scale = 2^e
  int32_t offset;  // kPow2: idx = (|h| + offset) >> 4
};
inline BlockScale ScaleOf(const QuantMap& map, uint16_t top) {
  if (top < kTopMinNormal) return {BlockScale::kZero, 0, 0};
  const uint32_t t = (top + 8u) & ~0xfu;  // rounded to 3 mantissa bits, ties up
  if (t > kTopMaxScale) return {BlockScale::kOther, 0, 0};
  const int e = static_cast<int>(t >> 7) - 127 + ((t & 0x7f) != 0 ? 1 : 0);
  return {BlockScale::kPow2, e, 8 - static_cast<int32_t>(map.base >> 16) - e * 128};
}
inline float ScaleValue(const BlockScale& s, uint16_t top) {
  return s.kind == BlockScale::kZero  ? 0.0f
         : s.kind == BlockScale::kPow2 ? BitsFloat(static_cast<uint32_t>(s.e + 127) << 23)
                                       : BitsFloat(uint32_t{top} << 16);
}

// The code of an element with top half h in a kPow2 block (ScaleOf's
// offset).
inline uint8_t CodeOfTop(const QuantMap& map, uint16_t h, int32_t offset) {
  const int32_t a = h & kTopMagnitude;
  int32_t idx = 0;
  if (a >= kTopMinNormal) {
    idx = (a + offset) >> 4;
    idx = idx < 1 ? 1 : idx;  // at most max: |x| <= 2^e
  }
  const uint32_t sign = map.is_signed ? (uint32_t{h} >> 15) << 7 : 0;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(idx));
}

// The code of x / T for a block of kOther (x < 2^-126 encoding 0 as
// elsewhere): x / T by the reciprocal where it is finite.
inline uint8_t CodeOfOther(const QuantMap& map, uint16_t h, float scale) {
  if ((h & kTopExponent) == 0) return CodeOfTop(map, h, 0);
  const float x = BitsFloat(uint32_t{h} << 16), inv = 1.0f / scale;
  return QuantizeUnit(map, ReciprocalIsFinite(inv) ? x * inv : x / scale);
}

// Encodes the block whose top halves are h[0, n) and whose largest |h| is
// `top` into codes; returns its scale (the rules above).
inline float QuantizeTop(const QuantMap& map, const uint16_t* h, size_t n, uint16_t top,
                         uint8_t* codes) {
  const BlockScale s = ScaleOf(map, top);
  const float scale = ScaleValue(s, top);
  for (size_t i = 0; i < n; ++i) {
    codes[i] = s.kind == BlockScale::kOther ? CodeOfOther(map, h[i], scale)
                                            : CodeOfTop(map, h[i], s.offset);
  }
  return scale;
}

// The top halves of x[0, n) into h; returns the largest |h| over them and
// `top`.
inline uint16_t TopHalves(const float* x, size_t n, uint16_t* h, uint16_t top = 0) {
  for (size_t i = 0; i < n; ++i) {
    h[i] = TopHalf(x[i]);
    const uint16_t a = h[i] & kTopMagnitude;
    top = a > top ? a : top;
  }
  return top;
}

// REQUIRES: n <= kQuantBlock.
inline float QuantizeBlock(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
  uint16_t h[kQuantBlock];
  const uint16_t top = TopHalves(x, n, h);
  return QuantizeTop(map, h, n, top, codes);
}

inline void DequantizeBlock(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                            float* x) {
  for (size_t i = 0; i < n; ++i) x[i] = MapValue(map, codes[i]) * scale;
}

// Whether MapValue(code) * scale is MapValueAt(map, *base, code) for every
// code, exactly: scale a power of two 2^e with every nonzero entry times
// 2^e normal; then *base = map.base + e << 23 and a step decodes with no
// multiply. Other scales (0, a checkpoint's absmax) multiply.
inline bool ExactBase(const QuantMap& map, float scale, uint32_t* base) {
  const uint32_t bits = FloatBits(scale), exponent = bits >> 23;
  if ((bits & 0x807fffffu) != 0 || exponent == 0 || exponent == 0xff) return false;
  const int e = static_cast<int>(exponent) - 127;
  if (e < 1 - static_cast<int>(map.base >> 23)) return false;
  *base = map.base + (static_cast<uint32_t>(e) << 23);
  return true;
}

// The vector primitives of the int8 codec for an ISA's traits `Ops`; this
// plain version (one element at a time) serves the scalar kernels, and
// quant_avx2.h, quant_avx512.h and simd_avx512_bf16.h specialize it. Every
// version does the same operations on every element as TopHalves,
// CodeOfTop and MapValueAt, so the same bits:
//   Words, NoWords, Reduce: a running max of |top half| over vectors;
//   Tile<kSigned>(h, x, &acc): the top halves of x[0, kWidth) to
//     h[0, kWidth) (or, for the unsigned map, whose codes ignore the sign,
//     their magnitudes), and their magnitudes into acc; Tile2 (where a
//     specialization has it): two vectors at once;
//   Encoder<kSigned>(offset).Store(codes, h): the codes of h[0, kWidth) in
//     a kPow2 block (ScaleOf's offset) by MapFor<kSigned>(); Store2 (where
//     a specialization has it): two vectors' worth;
//   Decoder<kSigned>(base, scale): Exact(codes) is MapValueAt(map, base,
//     code) of codes[0, kWidth), Read(codes) that times the scale.
// Build encoders and decoders once per block, outside the loop.
template <class Ops>
struct QuantVec {
  using Words = uint16_t;
  static Words NoWords() { return 0; }
  static uint16_t Reduce(Words acc) { return acc; }
  template <bool kSigned>
  static void Tile(uint16_t* h, float x, Words* acc) {
    *acc = TopHalves(&x, 1, h, *acc);
  }

  template <bool kSigned>
  struct Encoder {
    explicit Encoder(int32_t off) : offset(off) {}
    void Store(uint8_t* codes, const uint16_t* h) const {
      codes[0] = CodeOfTop(MapFor<kSigned>(), h[0], offset);
    }
    int32_t offset;
  };

  template <bool kSigned>
  struct Decoder {
    Decoder(uint32_t b, float s) : base(b), scale(s) {}
    float Exact(const uint8_t* codes) const { return MapValueAt(MapFor<kSigned>(), base, codes[0]); }
    float Read(const uint8_t* codes) const { return Exact(codes) * scale; }
    uint32_t base;
    float scale;
  };
};

// The largest |top half| over a block: whole vectors by Tile, the rest one
// by one.
template <class Ops>
struct TopMaxAcc {
  typename QuantVec<Ops>::Words vec = QuantVec<Ops>::NoWords();
  uint16_t rest = 0;
  uint16_t Value() const {
    const uint16_t v = QuantVec<Ops>::Reduce(vec);
    return v > rest ? v : rest;
  }
};

// The encoding of one quantization block, whose top halves are h[0, n)
// and largest |h| `top`, into codes by MapFor<kSigned>(), a vector at a
// time (Next) or all that is left (Finish): Next lets a step encode the
// block before the one it steps, in the same loop. Blocks other than kPow2
// encode in Finish, by QuantizeTop. Default-constructed: nothing to encode.
template <class Ops, bool kSigned>
class BlockEncoder {
  static constexpr size_t W = Ops::kWidth;
  using Enc = typename QuantVec<Ops>::template Encoder<kSigned>;

 public:
  BlockEncoder() : BlockEncoder(nullptr, 0, 0, nullptr) {}
  BlockEncoder(const uint16_t* h, size_t n, uint16_t top, uint8_t* codes)
      : h_(h),
        codes_(codes),
        n_(n),
        top_(top),
        scale_(ScaleOf(MapFor<kSigned>(), top)),
        enc_(scale_.offset) {
    vector_ = n != 0 && scale_.kind == BlockScale::kPow2;
    end_ = vector_ ? n / W * W : 0;
  }

  // The block's scale.
  float scale() const { return ScaleValue(scale_, top_); }

  [[gnu::always_inline]] void Next() {
    if (done_ < end_) {
      enc_.Store(codes_ + done_, h_ + done_);
      done_ += W;
    }
  }

  // Two vectors' worth: by the encoder's Store2 where it has one, else as
  // Next twice.
  [[gnu::always_inline]] void Next2() {
    if constexpr (requires(const Enc& e, uint8_t* c, const uint16_t* h) { e.Store2(c, h); }) {
      if (__builtin_expect(done_ + 2 * W <= end_, 1)) {
        enc_.Store2(codes_ + done_, h_ + done_);
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
      if (n_ != 0) QuantizeTop(map, h_, n_, top_, codes_);
    } else {
      while (done_ + 2 * W <= end_) Next2();  // the step's code path, here too
      for (; done_ < end_; done_ += W) enc_.Store(codes_ + done_, h_ + done_);
      for (size_t i = end_; i < n_; ++i) codes_[i] = CodeOfTop(map, h_[i], scale_.offset);
    }
    n_ = end_ = done_ = 0;
    vector_ = false;
  }

 private:
  const uint16_t* h_;
  uint8_t* codes_;
  size_t n_;
  uint16_t top_;
  BlockScale scale_;
  Enc enc_;
  bool vector_ = false;
  size_t end_ = 0;   // the vectors' end
  size_t done_ = 0;  // elements encoded
};

// QuantizeBlock and DequantizeBlock with the primitives of `Ops`.
// REQUIRES: n <= kQuantBlock.
template <class Ops, bool kSigned>
float QuantizeVecOf(const float* x, size_t n, uint8_t* codes) {
  using Q = QuantVec<Ops>;
  alignas(64) uint16_t h[kQuantBlock];
  TopMaxAcc<Ops> acc;
  size_t i = 0;
  for (; i + Ops::kWidth <= n; i += Ops::kWidth) {
    Q::template Tile<kSigned>(h + i, Ops::Load(x + i), &acc.vec);
  }
  acc.rest = TopHalves(x + i, n - i, h + i);
  BlockEncoder<Ops, kSigned> encoder(h, n, acc.Value(), codes);
  encoder.Finish();
  return encoder.scale();
}

template <class Ops>
float QuantizeVec(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
  return map.is_signed ? QuantizeVecOf<Ops, true>(x, n, codes)
                       : QuantizeVecOf<Ops, false>(x, n, codes);
}

template <class Ops, bool kSigned>
void DequantizeVecOf(const uint8_t* codes, size_t n, float scale, float* x) {
  const typename QuantVec<Ops>::template Decoder<kSigned> d(MapFor<kSigned>().base, scale);
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
