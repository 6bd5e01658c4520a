#include "server/core/populate.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace zerostate::server {

bool PopulateForWrite(void* data, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end <= begin) return false;
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

std::string PopulatedString(size_t bytes) {
  std::string s;
  s.reserve(bytes);  // allocated, not touched yet
  PopulateForWrite(s.data(), bytes);
  s.resize(bytes);
  return s;
}

}  // namespace zerostate::server
