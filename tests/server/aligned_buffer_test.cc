// server/core/aligned_buffer.h: a small buffer comes from the heap, 64-byte
// aligned and zeroed; one of a huge page or more is a mapping starting on a
// 2 MiB boundary that holds the whole buffer (the huge-page advice did not
// split it), zeroed, writable end to end, handed over by a move and
// unmapped when destroyed.
#include "server/core/aligned_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace zerostate::server {
namespace {

// The [begin, end) of the mapping in /proc/self/maps that holds `p`.
std::pair<uintptr_t, uintptr_t> MappingOf(const void* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream range(line.substr(0, line.find(' ')));
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    range >> std::hex >> begin >> dash >> end;
    if (begin <= at && at < end) return {begin, end};
  }
  return {0, 0};
}

bool AllZero(const float* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0.0f) return false;
  }
  return true;
}

TEST(AlignedBufferTest, ASmallBufferIsAlignedAndZero) {
  AlignedBuffer<float> b(1000);
  ASSERT_EQ(b.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kBufferAlign, 0u);
  EXPECT_TRUE(AllZero(b.data(), b.size()));
}

TEST(AlignedBufferTest, AHugeBufferIsAMappingOfItsOwnOnAHugePageBoundary) {
  const size_t n = (3u << 20) / sizeof(float) + 3;  // 3 MiB and 12 bytes: a partial last page
  AlignedBuffer<float> b(n);
  const uintptr_t at = reinterpret_cast<uintptr_t>(b.data());
  EXPECT_EQ(at % kHugePage, 0u);
  // One mapping holds it all (a neighbour of the same kind may have merged in).
  const auto [begin, end] = MappingOf(b.data());
  EXPECT_LE(begin, at);
  EXPECT_GE(end, at + (n * sizeof(float) + 4095) / 4096 * 4096);
  EXPECT_TRUE(AllZero(b.data(), n));
  for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<float>(i);
  EXPECT_EQ(b.data()[n - 1], static_cast<float>(n - 1));
}

TEST(AlignedBufferTest, AMoveHandsTheMappingOverAndTheLastOwnerUnmapsIt) {
  const size_t n = kHugePage / sizeof(float);
  AlignedBuffer<float> a(n);
  float* p = a.data();
  p[n - 1] = 7.0f;
  {
    AlignedBuffer<float> b(std::move(a));
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.data()[n - 1], 7.0f);
    AlignedBuffer<float> small(16);
    small = std::move(b);  // the swap: `b` now owns the small one
    EXPECT_EQ(small.data(), p);
    EXPECT_EQ(b.size(), 16u);
  }
  std::vector<unsigned char> vec(1);
  EXPECT_EQ(mincore(p, static_cast<size_t>(sysconf(_SC_PAGESIZE)), vec.data()), -1);
  EXPECT_EQ(errno, ENOMEM);  // unmapped
}

}  // namespace
}  // namespace zerostate::server
