// Where each part of a block's optimizer state lies in the floats a state
// tier keeps for it (server/core/tier/state_tier.h), by moment format.
// Plain arithmetic with no dependencies: the ISA kernel files include it.
//
//   [param: block_elems fp32][m codes][v codes][m scales][v scales]
//
// fp32: each moment is block_elems fp32 (the layout before compact
// formats, unchanged); bf16: block_elems uint16 each; int8: block_elems
// uint8 codes each, then one fp32 absmax per kQuantBlock elements (counted
// from the block's first element) for m, then for v. Every part starts on
// a 64-byte boundary in the compact formats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerostate::server {

enum class MomentFormat : uint8_t { kFp32 = 0, kBf16 = 1, kInt8 = 2 };
inline constexpr int kMomentFormatCount = 3;

// Elements that share one int8 scale (8-bit Adam's block size).
inline constexpr uint32_t kQuantBlock = 2048;

struct StateLayout {
  uint32_t block_elems = 0;
  int moments = 0;  // 0, 1 or 2
  MomentFormat format = MomentFormat::kFp32;

  static constexpr size_t Round16(size_t floats) { return (floats + 15) / 16 * 16; }

  // Floats of one moment's codes.
  size_t moment_floats() const {
    switch (format) {
      case MomentFormat::kBf16:
        return Round16((size_t{block_elems} * 2 + 3) / 4);
      case MomentFormat::kInt8:
        return Round16((size_t{block_elems} + 3) / 4);
      default:
        return block_elems;
    }
  }
  size_t quant_blocks() const { return (size_t{block_elems} + kQuantBlock - 1) / kQuantBlock; }
  // Floats of one moment's scales (int8 only).
  size_t scale_floats() const { return format == MomentFormat::kInt8 ? Round16(quant_blocks()) : 0; }

  // fp32 is padded nowhere, as before compact formats (a multiple of 16
  // elements keeps every part 64-byte aligned, as the tiers need).
  size_t m_offset() const { return format == MomentFormat::kFp32 ? block_elems : Round16(block_elems); }
  size_t v_offset() const { return m_offset() + moment_floats(); }
  size_t m_scale_offset() const { return m_offset() + moments * moment_floats(); }
  size_t v_scale_offset() const { return m_scale_offset() + scale_floats(); }
  // The whole state of one block.
  size_t total_floats() const {
    return m_offset() + moments * (moment_floats() + scale_floats());
  }
  // Bytes of state per parameter of a whole block, for budgets and metrics.
  double bytes_per_param() const {
    return block_elems == 0 ? 0 : 4.0 * total_floats() / block_elems;
  }
};

}  // namespace zerostate::server
