// Fresh memory faulted in by one call before it is written
// (server/core/populate.h): the whole pages inside a range become
// resident, the pages it only touches stay as they were, and a populated
// string is a string of zeros of the size asked, whatever that size.
#include "server/core/populate.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace zerostate::server {
namespace {

// Which pages of the mapping [base, base + pages * page) are resident.
std::vector<bool> Resident(void* base, size_t pages) {
  std::vector<unsigned char> vec(pages);
  EXPECT_EQ(mincore(base, pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)), vec.data()), 0)
      << std::strerror(errno);
  std::vector<bool> resident(pages);
  for (size_t i = 0; i < pages; ++i) resident[i] = (vec[i] & 1) != 0;
  return resident;
}

TEST(PopulateTest, FaultsInTheWholePagesInsideTheRangeAndNoOther) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  constexpr size_t kPages = 5;
  void* map = mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  auto* base = static_cast<char*>(map);
  EXPECT_EQ(Resident(base, kPages), std::vector<bool>(kPages, false));

  // From inside page 0 to inside page 3: pages 1 and 2 are whole.
  if (!PopulateForWrite(base + 100, 3 * page)) {
    ASSERT_EQ(errno, EINVAL) << "populate failed: " << std::strerror(errno);
    munmap(map, kPages * page);
    GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  }
  EXPECT_EQ(Resident(base, kPages), (std::vector<bool>{false, true, true, false, false}));

  // No whole page inside: nothing to do, nothing faulted.
  EXPECT_FALSE(PopulateForWrite(base + 3 * page + 1, page - 2));
  EXPECT_FALSE(PopulateForWrite(base + 4 * page, 0));
  EXPECT_EQ(Resident(base, kPages), (std::vector<bool>{false, true, true, false, false}));
  munmap(map, kPages * page);
}

TEST(PopulateTest, APopulatedStringIsZerosOfTheSizeAsked) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t bytes : {size_t{0}, size_t{1}, page - 1, page + 1, (size_t{4} << 20) + 3}) {
    SCOPED_TRACE(bytes);
    std::string s = PopulatedString(bytes);
    ASSERT_EQ(s.size(), bytes);
    EXPECT_EQ(s, std::string(bytes, '\0'));
  }
}

}  // namespace
}  // namespace zerostate::server
