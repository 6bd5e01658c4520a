// Fresh memory about to be written whole, faulted in by one
// madvise(MADV_POPULATE_WRITE) call rather than by one page fault per page
// as the first write reaches it. A backup receives each held step's sums
// into fresh memory while no recycled sum fits (KeptSums::Buffer), and on
// a VM those faults, one per 4 KiB, cost more than the receive's copy
// (bench/results/replication-2026-12-06d-vm).
#pragma once

#include <cstddef>
#include <string>

namespace zerostate::server {

// Faults in, for writing, the whole pages inside [data, data + bytes).
// False where none lies inside or the kernel cannot (before Linux 5.14;
// out of memory): then the first writes fault them in as before.
bool PopulateForWrite(void* data, size_t bytes);

// `bytes` zero bytes, their memory populated (PopulateForWrite) before it
// is zeroed.
std::string PopulatedString(size_t bytes);

}  // namespace zerostate::server
