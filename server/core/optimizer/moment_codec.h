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
// int8 (8-bit Adam, Dettmers et al. 2021): a quantization block of at
// most kQuantBlock elements is stored as scale = max |x| over the block
// (fp32) and, per element, the index of the entry of a 256-entry sorted
// dynamic map nearest to x * (1 / scale) (ties to the lower entry; scale 0
// stores 0's index). 1 / scale is rounded to fp32 once per block and each
// element multiplied by it (a product, not a quotient: a division per
// element made the int8 step bound by the divider); where 1 / scale is not
// finite (scale below 2^-128, or NaN) the block divides, x / scale, as the
// reciprocal would overflow. Every ISA follows this rule, so codes agree.
// Decoding is map[code] * scale. The first moment uses the signed map, the
// second (never negative) the unsigned one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerostate::server::kernels {

// A sorted 256-entry dynamic quantization map and the tables that find an
// entry in a fixed number of steps.
struct QuantMap {
  alignas(64) float value[256];
  // The mids as an implicit binary search tree, level by level: node h
  // (2^l <= h < 2^(l+1), level l) is mid[(2 (h - 2^l) + 1) 2^(7-l) - 1],
  // its children 2h and 2h + 1; walking h = 2h + (node h < x) from h = 1 for
  // 8 levels ends at 256 + the number of mids below x, the code. Stored
  // with each level's nodes in the bit-reversed order of their path:
  // heap_rev[2^l + r] is node 2^l + reverse_l(r), r's bit k the step taken
  // at level k, so that a walk which sets bit l of r at level l reads each
  // level's run of nodes by r directly (quant_avx512.h); heap_rev[0] unused.
  alignas(64) float heap_rev[256];
  // mid[j]: the largest float not above the exact midpoint of value[j] and
  // value[j + 1]; mid[255] = mid[256] = +inf. The nearest entry of x (ties
  // to the lower) is the number of mids below x.
  float mid[257];
  // lo[k]: the number of mids below the least float whose order key
  // (OrderKey) has top 16 bits k. At most kProbes more mids lie below any
  // float of that bucket (checked when the map is built).
  uint8_t lo[65536];
  uint8_t lo_pad[4];  // vector code reads 4 bytes at lo + k
};
inline constexpr int kProbes = 2;

// 8-bit Adam's maps (the "dynamic tree" map of bitsandbytes'
// create_dynamic_map with 7 exponent bits), built once in quant_map.cc:
// signed (first moments) and unsigned (second moments).
const QuantMap& SignedMap();
const QuantMap& UnsignedMap();

// A key whose unsigned order is the order of the floats (NaNs aside).
inline uint32_t OrderKey(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// The code of x (already scaled): the number of mids below x (a NaN: 0).
// The probes are independent of each other (the mids are sorted, so the
// count of those below x among mid[lo], mid[lo + 1] is the same as probing
// one after the other), which lets their loads overlap.
inline uint8_t QuantizeUnit(const QuantMap& map, float x) {
  const uint32_t lo = map.lo[OrderKey(x) >> 16];
  uint32_t code = lo;
  for (int k = 0; k < kProbes; ++k) code += map.mid[lo + k] < x ? 1 : 0;
  return static_cast<uint8_t>(code > 255 ? 255 : code);
}

// Whether a block scales by its reciprocal scale `inv` (else it divides).
inline bool ReciprocalIsFinite(float inv) {
  uint32_t u;
  __builtin_memcpy(&u, &inv, 4);
  return (u & 0x7f800000u) != 0x7f800000u;
}

// Encodes x[0, n) (n <= kQuantBlock) into codes and returns the scale.
inline float QuantizeBlock(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
  // max |x| as the largest magnitude's bits: for floats that are not NaN
  // the integer order is the numeric order, and an integer max reduction
  // vectorizes (a float one would not, for NaN's sake).
  uint32_t bits = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    __builtin_memcpy(&u, x + i, 4);
    u &= 0x7fffffffu;
    bits = u > bits ? u : bits;
  }
  float absmax;
  __builtin_memcpy(&absmax, &bits, 4);
  if (absmax == 0) {
    const uint8_t zero = QuantizeUnit(map, 0.0f);
    for (size_t i = 0; i < n; ++i) codes[i] = zero;
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

inline void DequantizeBlock(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                            float* x) {
  for (size_t i = 0; i < n; ++i) x[i] = map.value[codes[i]] * scale;
}

// QuantizeBlock and DequantizeBlock for an ISA's vector traits `Ops`: the
// same operations on every element, so the same bits. This plain version
// serves the scalar kernels; quant_avx2.h and quant_avx512.h specialize it.
// Decoder reads one vector (Ops::kWidth codes) of a block at a time, for a
// step that decodes its moments as it loads them; it holds what it needs of
// the map (AVX-512: the whole map, in registers), so build it once per
// block, outside the loop.
template <class Ops>
struct QuantVec {
  static float Quantize(const QuantMap& map, const float* x, size_t n, uint8_t* codes) {
    return QuantizeBlock(map, x, n, codes);
  }

  struct Decoder {
    const QuantMap& map;
    float scale;
    typename Ops::F Read(const uint8_t* codes) const { return map.value[*codes] * scale; }
  };

  static void Dequantize(const QuantMap& map, const uint8_t* codes, size_t n, float scale,
                         float* x) {
    DequantizeBlock(map, codes, n, scale, x);
  }
};

}  // namespace zerostate::server::kernels
