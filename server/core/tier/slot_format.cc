#include "server/core/tier/slot_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/core/io/crc32c.h"
#include "server/core/io/env.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kMagic = 0x3142535A;  // "ZSB1"
constexpr uint32_t kFormat = 1;

struct Trailer {
  uint32_t magic;
  uint32_t format;
  uint64_t block;
  uint64_t seq;
  uint64_t payload_bytes;
  uint32_t crc;
  uint8_t pad[28];
};
static_assert(sizeof(Trailer) == 64);

uint32_t SlotCrc(const void* payload, uint64_t bytes, uint64_t block, uint64_t seq) {
  uint32_t crc = io::Crc32c(payload, bytes);
  crc = io::Crc32c(&block, sizeof(block), crc);
  return io::Crc32c(&seq, sizeof(seq), crc);
}

}  // namespace

SlotLayout::SlotLayout(uint64_t payload)
    : payload_bytes(payload),
      slot_bytes((payload + sizeof(Trailer) + io::kIoAlign - 1) / io::kIoAlign * io::kIoAlign) {}

void SealSlot(const SlotLayout& layout, uint64_t block, uint64_t seq, void* slot) {
  Trailer t{};
  t.magic = kMagic;
  t.format = kFormat;
  t.block = block;
  t.seq = seq;
  t.payload_bytes = layout.payload_bytes;
  t.crc = SlotCrc(slot, layout.payload_bytes, block, seq);
  std::memcpy(static_cast<char*>(slot) + layout.payload_bytes, &t, sizeof(t));
}

absl::Status CheckSlot(const SlotLayout& layout, uint64_t block, uint64_t seq, const void* slot,
                       const std::string& where) {
  Trailer t;
  std::memcpy(&t, static_cast<const char*>(slot) + layout.payload_bytes, sizeof(t));
  if (t.magic != kMagic || t.format != kFormat || t.payload_bytes != layout.payload_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s: no valid slot trailer (magic 0x%08x, format %u, %u payload bytes)", where, t.magic,
        t.format, t.payload_bytes));
  }
  if (t.block != block || t.seq != seq) {
    return absl::DataLossError(absl::StrCat(where, ": slot holds block ", t.block, " sequence ",
                                            t.seq, " but block ", block, " sequence ", seq,
                                            " was written there (stale or misdirected write)"));
  }
  uint32_t crc = SlotCrc(slot, layout.payload_bytes, block, seq);
  if (crc != t.crc) {
    return absl::DataLossError(absl::StrFormat(
        "%s: checksum mismatch (stored crc32c 0x%08x, computed 0x%08x)", where, t.crc, crc));
  }
  return absl::OkStatus();
}

}  // namespace zerostate::server
