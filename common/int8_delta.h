// Delta coding of the int8 gather: the weights a trainer rebuilds from the
// int8 wire track the exact master to within the quantum of the change
// since its last copy, not the quantum of the weights themselves.
//
// Both ends keep the same bf16 copy of a run of weights (the trainer: its
// parameters; the sender: a copy of them). A version is sent as an int8
// chunk of common/int8_wire.h's format holding, per element,
//   diff[i] = bf16(target[i]) - copy[i]   (one fp32 subtraction)
// quantized as EncodeInt8 quantizes (64-element groups, power-of-two
// scales: every ISA gives the same bytes); then both ends apply it:
//   copy[i] = bf16(copy[i] + codes[i] * scale)   (round half to even)
// The product is exact (7 bits times a power of two), so a fused
// multiply-add gives the same bits as the two operations: the receiver's
// copy is the sender's, bit for bit, on every machine. After a version,
// |bf16(target[i]) - copy[i]| <= scale / 2 of its group (half a quantum of
// the change; a group's quantum is set by its largest change, not by its
// largest weight), plus the fp32 rounding of the subtraction and the
// bf16 rounding of the copy. A target
// that stays put is reached exactly, its bf16 copy bit for bit, within a
// few versions (each divides the group's largest error by about 127, and
// an element is exact once the quantum is below its bf16 ulp), where a
// plain int8 copy stays up to half a quantum of the weights away for
// good. A code -128 (a target or copy not finite)
// makes the copy NaN; it stays NaN (the fp16 overflow check sees it) until
// the copy is sent whole.
//
// The copy is state of the sender, per block and version: every node and
// every retry must get the change against the same previous copy.
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "common/cpu_features.h"
#include "common/int8_wire.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate {

// The sender: writes the chunk of target - copy into `out`
// (Int8ChunkBytes(n) bytes) and applies it to `copy` (n bf16). `target`:
// n elements of FP32 (the master) or BF16 (the job's bf16 copy). Errors:
// INVALID_ARGUMENT naming `dtype` for another dtype, `n` for 0; nothing
// written then.
[[nodiscard]] absl::Status EncodeInt8Delta(Isa isa, const void* target, v1::DType dtype,
                                           size_t n, uint16_t* copy, uint8_t* out);
[[nodiscard]] absl::Status EncodeInt8Delta(const void* target, v1::DType dtype, size_t n,
                                           uint16_t* copy, uint8_t* out);

// Both ends: copy[i] = bf16(copy[i] + decode(run, i)) for n elements.
void ApplyInt8Delta(const Int8Run& run, size_t n, uint16_t* copy);

// The receiver: applies a received chunk (ReadInt8Chunk) to a copy of
// `n` elements. Errors: INVALID_ARGUMENT naming `elems` when the chunk
// holds another count than n; the copy unchanged then.
[[nodiscard]] absl::Status ApplyInt8Delta(const Int8Chunk& chunk, size_t n, uint16_t* copy);

}  // namespace zerostate
