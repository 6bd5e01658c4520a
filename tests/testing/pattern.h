// Test data whose bytes differ from one offset to the next, so that a
// shifted, dropped or repeated piece shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace zerostate::testing {

// `n` pseudo-random bytes from `seed`.
inline std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  std::mt19937 gen(seed);
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

}  // namespace zerostate::testing
