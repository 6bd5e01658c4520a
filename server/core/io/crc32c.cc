#include "server/core/io/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace zerostate::server::io {
namespace {

constexpr uint32_t kPoly = 0x82F63B78;  // CRC32C, reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t SoftwareUpdate(const uint8_t* p, size_t n, uint32_t c) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

__attribute__((target("sse4.2"))) uint32_t HardwareUpdate(const uint8_t* p, size_t n,
                                                          uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

// Three independent crc32 chains over three equal parts (the instruction's
// latency is three times its throughput, so one chain leaves two idle).
// s0..s2 are raw (not inverted) states, updated in place.
__attribute__((target("sse4.2"))) void HardwareUpdate3(const uint8_t* p, size_t part,
                                                       uint32_t* s0, uint32_t* s1, uint32_t* s2) {
  uint64_t a = *s0, b = *s1, c = *s2;
  for (size_t i = 0; i < part; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + part + i, 8);
    std::memcpy(&wc, p + 2 * part + i, 8);
    a = _mm_crc32_u64(a, wa);
    b = _mm_crc32_u64(b, wb);
    c = _mm_crc32_u64(c, wc);
  }
  *s0 = static_cast<uint32_t>(a);
  *s1 = static_cast<uint32_t>(b);
  *s2 = static_cast<uint32_t>(c);
}

// GF(2) 32x32 matrix (one column per bit) times a vector.
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// The CRC of A||B from crc(A), crc(B) and len(B) (zlib's crc32_combine,
// with the CRC32C polynomial): crc(A) is advanced over len2 zero bytes by
// repeated squaring of the one-zero-bit operator.
uint32_t Combine(uint32_t crc1, uint32_t crc2, size_t len2) {
  uint32_t even[32], odd[32];
  odd[0] = kPoly;
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  Gf2Square(even, odd);  // two zero bits
  Gf2Square(odd, even);  // four zero bits
  while (len2 != 0) {
    Gf2Square(even, odd);
    if (len2 & 1) crc1 = Gf2Times(even, crc1);
    len2 >>= 1;
    if (len2 == 0) break;
    Gf2Square(odd, even);
    if (len2 & 1) crc1 = Gf2Times(odd, crc1);
    len2 >>= 1;
  }
  return crc1 ^ crc2;
}

constexpr size_t kThreeWayMin = 3 * 1024;  // below this the combines cost more than they save

uint32_t HardwareCrc(const uint8_t* p, size_t n, uint32_t crc) {
  if (n < kThreeWayMin) return ~HardwareUpdate(p, n, ~crc);
  const size_t part = n / 3 / 8 * 8;
  uint32_t s0 = ~crc, s1 = ~0u, s2 = ~0u;
  HardwareUpdate3(p, part, &s0, &s1, &s2);
  const size_t rest = n - 3 * part;
  uint32_t tail = ~HardwareUpdate(p + 3 * part, rest, s2);
  return Combine(Combine(~s0, ~s1, part), tail, part + rest);
}

bool HasSse42() { return __builtin_cpu_supports("sse4.2"); }

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  static const bool hw = HasSse42();  // immutable after first use
  const auto* p = static_cast<const uint8_t*>(data);
  return hw ? HardwareCrc(p, n, crc) : ~SoftwareUpdate(p, n, ~crc);
}

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~SoftwareUpdate(static_cast<const uint8_t*>(data), n, ~crc);
}

}  // namespace zerostate::server::io
