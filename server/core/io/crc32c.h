// CRC32C (Castagnoli, the iSCSI/ext4/RocksDB checksum) of a byte range.
// Uses the SSE4.2 crc32 instruction when the CPU has it, else a table-driven
// software loop; both give the same value. Thread-safe (no state).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerostate::server::io {

// Extends `crc` (the value of a previous call, or 0 to start) over
// data[0, n). Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The software loop alone, for tests that compare the two paths.
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace zerostate::server::io
