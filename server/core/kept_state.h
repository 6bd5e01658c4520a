// A block's state as it was at one version, kept after a step changes the
// tier's copy in place, for as long as a running checkpoint of that version
// needs it (copy-on-write, JobSnapshots::BeginCheckpoint): until its writer
// took the block or the checkpoint ended. It is freed when the holder lets go.
//
// Not thread-safe: the owning block's mutex guards it.
#pragma once

#include <cstdint>

#include "common/convert.h"
#include "server/core/aligned_buffer.h"

namespace zerostate::server {

class KeptState {
 public:
  enum Holder : unsigned { kCheckpoint = 1 };

  bool held() const { return holders_ != 0; }
  // The version of what is kept. REQUIRES: held().
  uint64_t version() const { return version_; }
  // `floats` floats of the kept state. REQUIRES: held().
  const float* data() const { return data_.data(); }
  size_t size() const { return data_.size(); }

  // Keeps `n` floats of `state`, the block's state at `version`, for
  // `holder`. When a state of that version is already kept, only adds the
  // holder and copies nothing. Returns whether it copied.
  // REQUIRES: !held() || version() == version.
  bool Keep(Holder holder, uint64_t version, const float* state, size_t n) {
    const bool copy = !held();
    if (copy) {
      if (data_.size() != n) data_ = AlignedBuffer<float>(n);
      // Streaming stores: read only by the checkpoint's writer, so neither
      // the read of the lines before writing them nor the cache is spent on it.
      DecodeFloatsStreaming(state, n, v1::DTYPE_FP32, data_.data());
      version_ = version;
    }
    holders_ |= holder;
    return copy;
  }

  // `holder` lets go; the memory goes when no holder is left.
  void Release(Holder holder) {
    holders_ &= ~static_cast<unsigned>(holder);
    if (holders_ == 0) data_ = AlignedBuffer<float>();
  }

 private:
  AlignedBuffer<float> data_;
  uint64_t version_ = 0;
  unsigned holders_ = 0;
};

}  // namespace zerostate::server
