#include "client/shared_buffer.h"

#include <functional>

namespace zerostate::client {

bool SharedBuffer::Holds(const void* p, size_t bytes) const {
  // Compared as addresses of unrelated objects: std::less gives a total order.
  const uint8_t* q = static_cast<const uint8_t*>(p);
  std::less_equal<const uint8_t*> le;
  return le(data(), q) && le(q, data() + size()) &&
         bytes <= static_cast<size_t>(data() + size() - q);
}

absl::StatusOr<std::shared_ptr<SharedBuffer>> SharedBuffers::Allocate(size_t bytes) {
  // Made outside the lock (a large memfd takes a while to map); published under it.
  // Populated: the caller's memory is committed here, and the server can
  // map it whole at once rather than fault in a page per first write.
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      ShmSegment::Create(bytes, /*populate=*/true);
  if (!segment.ok()) return segment.status();
  absl::MutexLock lock(&mu_);
  auto buffer = std::make_shared<SharedBuffer>(static_cast<uint32_t>(buffers_.size() + 1),
                                               *std::move(segment));
  buffers_.push_back(buffer);
  return buffer;
}

std::shared_ptr<const SharedBuffer> SharedBuffers::Find(const void* p, size_t bytes) const {
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<SharedBuffer>& b : buffers_) {
    if (b->Holds(p, bytes)) return b;
  }
  return nullptr;
}

}  // namespace zerostate::client
