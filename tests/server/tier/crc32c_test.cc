#include "server/core/io/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace zerostate::server::io {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, HardwareMatchesSoftwareAndExtends) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(10007);
  for (auto& c : data) c = static_cast<uint8_t>(rng());
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 3071u, 3072u, 4096u, 10007u}) {
    EXPECT_EQ(Crc32c(data.data(), n), Crc32cPortable(data.data(), n)) << n;
  }
  uint32_t whole = Crc32c(data.data(), data.size());
  uint32_t parts = Crc32c(data.data() + 1000, data.size() - 1000, Crc32c(data.data(), 1000));
  EXPECT_EQ(whole, parts);
}

}  // namespace
}  // namespace zerostate::server::io
