#include "server/dataplane/shared_mappings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::StatusOr<std::shared_ptr<const ShmSegment>> SharedMappings::Attach(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    absl::Status s = absl::UnavailableError(absl::StrCat("fstat: ", std::strerror(errno)));
    close(fd);
    return s;
  }
  const FileId id{st.st_dev, st.st_ino};
  absl::MutexLock lock(&mu_);
  absl::erase_if(mapped_, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = mapped_.find(id); it != mapped_.end()) {
    // The same file, so the same seals (they are never removed) and size
    // that Attach checked for the mapping held.
    if (std::shared_ptr<const ShmSegment> held = it->second.lock()) {
      close(fd);
      return held;
    }
  }
  // Mapped under the lock: another connection of the same client waits
  // for this mapping instead of making its own.
  absl::StatusOr<std::unique_ptr<ShmSegment>> attached = ShmSegment::Attach(fd, /*populate=*/true);
  if (!attached.ok()) return attached.status();
  std::shared_ptr<const ShmSegment> mapping = *std::move(attached);
  mapped_[id] = mapping;
  return mapping;
}

size_t SharedMappings::live() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, mapping] : mapped_) n += mapping.expired() ? 0 : 1;
  return n;
}

}  // namespace zerostate::server
