// SharedMappings (server/dataplane/shared_mappings.h) on real memfds: the
// connections that hand over the same file share one mapping while any of
// them holds it; another file, or the same one after every holder let go,
// is mapped anew; an unsealed memfd is refused, the registry unchanged.
#include "server/dataplane/shared_mappings.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace zerostate::server {
namespace {

// A descriptor of `segment`'s file, as a second SCM_RIGHTS would give.
int Dup(const ShmSegment& segment) { return dup(segment.fd()); }

TEST(SharedMappingsTest, OneFileIsMappedOnceWhileHeldAndAnewAfter) {
  auto a = ShmSegment::Create(1 << 20, /*populate=*/true);
  auto b = ShmSegment::Create(1 << 20, /*populate=*/true);
  ASSERT_TRUE(a.ok() && b.ok());
  SharedMappings mappings;
  auto first = mappings.Attach(Dup(**a));
  auto second = mappings.Attach(Dup(**a));
  auto other = mappings.Attach(Dup(**b));
  ASSERT_TRUE(first.ok() && second.ok() && other.ok());
  EXPECT_EQ((*first)->data(), (*second)->data()) << "the same file was mapped twice";
  EXPECT_NE((*first)->data(), (*other)->data());
  EXPECT_EQ(mappings.live(), 2u);
  // What the client writes, the shared mapping reads.
  std::memcpy((*a)->data(), "zerostate", 10);
  EXPECT_EQ(std::memcmp((*second)->data(), "zerostate", 10), 0);
  first->reset();
  EXPECT_EQ(mappings.live(), 2u) << "still held by the second connection";
  second->reset();
  EXPECT_EQ(mappings.live(), 1u);
  auto again = mappings.Attach(Dup(**a));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(std::memcmp((*again)->data(), "zerostate", 10), 0);
  EXPECT_EQ(mappings.live(), 2u);
}

TEST(SharedMappingsTest, AnUnsealedMemfdIsRefusedAndNothingIsKept) {
  int fd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  SharedMappings mappings;
  auto refused = mappings.Attach(fd);  // closes fd
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("not a memfd sealed"), std::string::npos)
      << refused.status();
  EXPECT_EQ(mappings.live(), 0u);
}

}  // namespace
}  // namespace zerostate::server
