// LocalGroup for processes of one node: POSIX shared memory holding a
// header with a process-shared barrier (worker/local_barrier.h), then
// every rank's buffers.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/local_group.h"

namespace zerostate::worker {
namespace {

constexpr uint64_t kMagic = 0x7a73776b73686d31ull;  // "zswkshm1"
constexpr size_t kHeaderBytes = 4096;

struct Header {
  uint64_t magic;
  uint32_t ranks;
  uint64_t elems;
  LocalBarrierState barrier;  // zeroed by ftruncate
};
static_assert(sizeof(Header) <= kHeaderBytes);

uint64_t PaddedElems(uint64_t elems) { return (elems + 15) / 16 * 16; }

size_t TotalBytes(uint32_t ranks, uint64_t elems) {
  return kHeaderBytes + size_t{2} * ranks * PaddedElems(elems) * sizeof(float);
}

absl::Status Errno(const std::string& what, const std::string& name) {
  return absl::InternalError(absl::StrCat(what, "(", name, "): ", std::strerror(errno)));
}

class ShmGroup : public LocalGroup {
 public:
  ShmGroup(std::string name, bool owner, void* base, size_t bytes, absl::Duration timeout)
      : name_(std::move(name)),
        owner_(owner),
        base_(static_cast<char*>(base)),
        bytes_(bytes),
        timeout_(timeout) {}
  ~ShmGroup() override {
    munmap(base_, bytes_);
    if (owner_) shm_unlink(name_.c_str());
  }
  uint32_t size() const override { return header()->ranks; }
  uint64_t elems() const override { return header()->elems; }
  float* params(uint32_t rank) override { return buffer(2 * rank); }
  float* grads(uint32_t rank) override { return buffer(2 * rank + 1); }
  absl::Status Barrier(uint32_t rank) override {
    return LocalBarrierWait(&header()->barrier, size(), rank, /*shared=*/true, timeout_);
  }
  absl::StatusOr<bool> Vote(uint32_t rank, bool failed) override {
    return LocalVote(&header()->barrier, size(), rank, /*shared=*/true, timeout_, failed);
  }

 private:
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  float* buffer(uint32_t i) {
    return reinterpret_cast<float*>(base_ + kHeaderBytes) + i * PaddedElems(elems());
  }

  const std::string name_;
  const bool owner_;
  char* const base_;
  const size_t bytes_;
  const absl::Duration timeout_;
};

absl::Status InitHeader(void* base, uint32_t ranks, uint64_t elems) {
  auto* h = static_cast<Header*>(base);
  h->ranks = ranks;
  h->elems = elems;
  __atomic_store_n(&h->magic, kMagic, __ATOMIC_RELEASE);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalGroup>> OpenShmGroup(const std::string& name, uint32_t ranks,
                                                         uint32_t rank, uint64_t elems,
                                                         absl::Duration timeout) {
  if (ranks == 0 || ranks > kMaxLocalRanks || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": rank ", rank, " of ", ranks,
                                                   " local ranks (at most ", kMaxLocalRanks, ")"));
  }
  const bool owner = rank == 0;
  const size_t bytes = TotalBytes(ranks, elems);
  if (owner) shm_unlink(name.c_str());  // a stale object from a crashed run
  int fd = shm_open(name.c_str(), owner ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0) return Errno("shm_open", name);
  struct stat st {};
  if (owner && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return Errno("ftruncate", name);
  }
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(name, ": size ", st.st_size, " != expected ", bytes,
                                                   " for ", ranks, " ranks of ", elems, " elements"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("mmap", name);
  auto group = std::make_unique<ShmGroup>(name, owner, base, bytes, timeout);
  if (owner) {
    if (auto s = InitHeader(base, ranks, elems); !s.ok()) return s;
  } else if (__atomic_load_n(&static_cast<Header*>(base)->magic, __ATOMIC_ACQUIRE) != kMagic) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": not initialized by local rank 0"));
  }
  return group;
}

}  // namespace zerostate::worker
