// A block's state as it was at one version, kept after a step changes the
// tier's copy in place, for as long as a running checkpoint of that version
// needs it (copy-on-write, JobSnapshots::BeginCheckpoint): until its writer
// took the block or the checkpoint ended, and freed then.
//
// Not thread-safe: the owning block's mutex guards it.
#pragma once

#include <cstdint>

#include "common/convert.h"
#include "server/core/aligned_buffer.h"

namespace zerostate::server {

class KeptState {
 public:
  bool held() const { return !data_.empty(); }
  // The version of what is kept. REQUIRES: held().
  uint64_t version() const { return version_; }
  // `floats` floats of the kept state. REQUIRES: held().
  const float* data() const { return data_.data(); }
  size_t size() const { return data_.size(); }

  // Keeps `n` floats of `state`, the block's state at `version`. When a
  // state of that version is already kept, copies nothing. Returns whether
  // it copied. REQUIRES: !held() || version() == version.
  bool Keep(uint64_t version, const float* state, size_t n) {
    if (held()) return false;
    data_ = AlignedBuffer<float>(n);
    // Streaming stores: read only by the checkpoint's writer, so neither
    // the read of the lines before writing them nor the cache is spent on it.
    DecodeFloatsStreaming(state, n, v1::DTYPE_FP32, data_.data());
    version_ = version;
    return true;
  }

  // The checkpoint lets go; the memory goes with it.
  void Release() { data_ = AlignedBuffer<float>(); }

 private:
  AlignedBuffer<float> data_;
  uint64_t version_ = 0;
};

}  // namespace zerostate::server
