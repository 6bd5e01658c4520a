// The on-disk format of one block slot: the block's state (payload) followed
// by a 64-byte trailer, padded to a multiple of io::kIoAlign so a slot is
// read or written in one direct I/O straight from a bounce buffer.
//
//   [payload: payload_bytes][trailer: magic, format, block, seq, crc32c][pad]
//
// The CRC32C covers the payload and the block index and sequence number, so
// a torn write, a stale slot or a write that landed on the wrong block is
// detected on read.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zerostate::server {

struct SlotLayout {
  // REQUIRES: payload_bytes a multiple of 64.
  explicit SlotLayout(uint64_t payload_bytes);
  uint64_t payload_bytes;
  uint64_t slot_bytes;  // payload + trailer, rounded up to io::kIoAlign
};

// Writes the trailer of `slot` (slot_bytes, payload already in place).
void SealSlot(const SlotLayout& layout, uint64_t block, uint64_t seq, void* slot);

// Checks that `slot` holds block `block` at sequence `seq` with an intact
// payload. Errors: DATA_LOSS naming `where` (block, slot, file) and what
// did not match.
[[nodiscard]] absl::Status CheckSlot(const SlotLayout& layout, uint64_t block, uint64_t seq,
                                     const void* slot, const std::string& where);

}  // namespace zerostate::server
