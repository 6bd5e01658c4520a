#include "client/int8_push.h"

#include "common/int8_wire.h"
#include "common/job_spec.h"

namespace zerostate::client {

float* ErrorFeedback::Residual(uint32_t node, uint64_t block) {
  const std::pair<uint32_t, uint64_t> key{node, block};
  {
    absl::MutexLock lock(&mu_);
    auto it = residuals_.find(key);
    if (it != residuals_.end()) return it->second.get();
  }
  // Made outside the lock; the first one published wins.
  auto made = std::make_unique<float[]>(block_elems_);
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = residuals_.try_emplace(key, std::move(made));
  return it->second.get();
}

Int8Push::Int8Push(ErrorFeedback* feedback, uint32_t node, uint64_t begin, const void* data,
                   v1::DType src, uint32_t block_elems, uint32_t chunk,
                   const std::vector<StreamPlan>& plans)
    : feedback_(feedback),
      node_(node),
      begin_(begin),
      data_(data),
      src_(src),
      block_elems_(block_elems),
      chunk_(chunk) {
  for (const StreamPlan& plan : plans) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->elems = plan.elems;
  }
}

const Int8Stream& Int8Push::Stream(Range elems) {
  for (const auto& slot : slots_) {
    if (slot->elems == elems) {
      absl::call_once(slot->once, [this, s = slot.get()] { Encode(*s); });
      return slot->stream;
    }
  }
  // Never: every stream of the call is one of its plans (a failover's
  // replay runs the same plans).
  std::abort();
}

void Int8Push::Encode(Slot& slot) const {
  Int8Stream& out = slot.stream;
  out.pieces = SplitByBlock(slot.elems, block_elems_, chunk_);
  out.at.push_back(0);
  for (const BlockPiece& p : out.pieces) out.at.push_back(out.at.back() + Int8ChunkBytes(p.count));
  out.bytes.resize(out.at.back());
  const size_t esize = DTypeSize(src_);
  for (size_t i = 0; i < out.pieces.size(); ++i) {
    const BlockPiece& p = out.pieces[i];
    const uint64_t elem = p.block * block_elems_ + p.offset;
    const auto* src = static_cast<const uint8_t*>(data_) + (elem - begin_) * esize;
    float* residual = feedback_->Residual(node_, p.block) + p.offset;
    EncodeInt8(src, src_, p.count, residual, out.bytes.data() + out.at[i]);
  }
}

}  // namespace zerostate::client
