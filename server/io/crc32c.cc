#include "server/io/crc32c.h"

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

bool HasSse42() { return __builtin_cpu_supports("sse4.2"); }

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  static const bool hw = HasSse42();  // immutable after first use
  const auto* p = static_cast<const uint8_t*>(data);
  return ~(hw ? HardwareUpdate(p, n, ~crc) : SoftwareUpdate(p, n, ~crc));
}

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~SoftwareUpdate(static_cast<const uint8_t*>(data), n, ~crc);
}

}  // namespace zerostate::server::io
