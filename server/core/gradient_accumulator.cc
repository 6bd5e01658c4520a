#include "server/core/gradient_accumulator.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/job_spec.h"

namespace zerostate::server {
namespace {

// The first node's pieces at least this long are decoded into the sum with
// non-temporal stores: the sum of a large job does not stay in cache until
// the step reads it, so reading its lines before writing them is wasted.
constexpr size_t kStreamElems = 16384;  // 64 KiB of fp32

// Once pieces were streamed, the statistics read at most this many elements
// of the sum after a fold (a small piece that came early): more would be a
// pass over memory on the push's path.
constexpr uint32_t kReadPastStreamElems = 128;

bool Overlaps(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, uint32_t begin,
              uint32_t end) {
  for (const auto& [b, e] : ranges) {
    if (b < end && begin < e) return true;
  }
  return false;
}

// Elements widened or converted at a time, on the stack.
constexpr size_t kTileElems = 2048;

std::vector<std::pair<uint32_t, uint32_t>> AllOf(
    uint32_t required, std::vector<std::pair<uint32_t, uint32_t>> tensor_elems) {
  if (tensor_elems.empty() && required > 0) tensor_elems.emplace_back(0, required);
  return tensor_elems;
}

}  // namespace

bool LandsGradientAsBf16(const v1::JobSpec& spec) {
  return spec.num_nodes() == 1 && spec.grad_dtype() == v1::DTYPE_BF16;
}

GradientAccumulator::GradientAccumulator(uint32_t num_nodes, uint32_t block_elems,
                                         uint32_t required, StagingBudget* staging,
                                         std::vector<std::pair<uint32_t, uint32_t>> tensor_elems,
                                         bool land_bf16)
    : num_nodes_(num_nodes),
      block_elems_(block_elems),
      required_(required),
      staging_(staging),
      tensor_elems_(AllOf(required, std::move(tensor_elems))),
      sum_(land_bf16 ? 0 : block_elems),
      landed_(land_bf16 ? block_elems : 0),
      nodes_(num_nodes) {}

bool GradientAccumulator::CoversTensors(const NodeState& ns) const {
  for (const auto& [b, e] : tensor_elems_) {
    if (!ns.Covers(b, e)) return false;
  }
  return true;
}

template <class Fn>
void GradientAccumulator::ForEachTensorPart(uint32_t begin, uint32_t end, Fn fn) const {
  for (const auto& [b, e] : tensor_elems_) {
    if (e <= begin) continue;
    if (b >= end) break;
    fn(std::max(b, begin), std::min(e, end));
  }
}

void GradientAccumulator::ZeroPadding(uint32_t begin, uint32_t end) {
  uint32_t at = begin;
  ForEachTensorPart(begin, end, [&](uint32_t first, uint32_t last) {
    std::fill(sum_.data() + at, sum_.data() + first, 0.0f);
    at = last;
  });
  std::fill(sum_.data() + at, sum_.data() + end, 0.0f);
}

GradientAccumulator::~GradientAccumulator() {
  for (NodeState& ns : nodes_) FreeStaging(ns);
}

void GradientAccumulator::FreeStaging(NodeState& ns) {
  if (ns.staging.empty()) return;
  if (staging_ != nullptr) staging_->Give(std::move(ns.staging));  // kept for reuse there
  ns.staging = AlignedBuffer<float>();
}

bool GradientAccumulator::NodeState::Covers(uint32_t begin, uint32_t end) const {
  if (begin >= end) return true;
  for (const auto& [b, e] : received) {
    if (b <= begin && end <= e) return true;
  }
  return false;
}

bool GradientAccumulator::Insert(NodeState& node, uint32_t begin, uint32_t end) {
  auto& r = node.received;
  if (Overlaps(r, begin, end)) return false;
  auto it = std::lower_bound(r.begin(), r.end(), std::make_pair(begin, end));
  it = r.insert(it, {begin, end});
  // Merge with the neighbours it touches, so Covers() sees one interval.
  if (it + 1 != r.end() && it->second == (it + 1)->first) {
    it->second = (it + 1)->second;
    r.erase(it + 1);
  }
  if (it != r.begin() && (it - 1)->second == it->first) {
    (it - 1)->second = it->second;
    r.erase(it);
  }
  return true;
}

absl::StatusOr<GradientAccumulator::Outcome> GradientAccumulator::Add(
    uint32_t node, uint32_t offset, uint32_t count, const void* data, v1::DType dtype) {
  ChunkView::Segment whole{static_cast<const uint8_t*>(data), count * DTypeSize(dtype)};
  return Add(node, offset, count, absl::MakeConstSpan(&whole, 1), dtype);
}

absl::StatusOr<GradientAccumulator::Outcome> GradientAccumulator::Add(
    uint32_t node, uint32_t offset, uint32_t count, absl::Span<const ChunkView::Segment> data,
    v1::DType dtype, std::shared_ptr<const void> held) {
  if (held != nullptr && MayHold(node, offset, count, data, dtype)) {
    return AddPiece(node, offset, count, [&](uint32_t, uint32_t) {
      held_data_ = reinterpret_cast<const uint16_t*>(data[0].data);
      held_ = std::move(held);
      // Node 0 is the only node and its first piece starts the statistics.
      SquareLanes* lanes = &stats_lanes_;
      alignas(64) float tile[kTileElems];
      for (uint32_t at = 0; at < required_; at += kTileElems) {
        const size_t k = std::min<size_t>(kTileElems, required_ - at);
        DecodeFloatsSquared(held_data_ + at, k, v1::DTYPE_BF16, tile, lanes);
      }
    });
  }
  return AddPiece(node, offset, count,
                  [&](uint32_t begin, uint32_t end) { Fold(node, begin, end, data, dtype); });
}

bool GradientAccumulator::MayHold(uint32_t node, uint32_t offset, uint32_t count,
                                  absl::Span<const ChunkView::Segment> data,
                                  v1::DType dtype) const {
  const bool no_padding =
      tensor_elems_.empty() ||
      (tensor_elems_.size() == 1 && tensor_elems_[0] == std::make_pair(0u, required_));
  return !landed_.empty() && node == 0 && dtype == v1::DTYPE_BF16 && offset == 0 &&
         count >= required_ && data.size() == 1 &&
         data[0].size >= size_t{required_} * sizeof(uint16_t) && no_padding &&
         nodes_[0].received.empty() && stats_lanes_.elems == 0;
}

absl::StatusOr<GradientAccumulator::Outcome> GradientAccumulator::Add(uint32_t node,
                                                                      uint32_t offset,
                                                                      const Int8Chunk& chunk) {
  return AddPiece(node, offset, static_cast<uint32_t>(chunk.elems),
                  [&](uint32_t begin, uint32_t end) { Fold(node, begin, end, chunk); });
}

absl::StatusOr<GradientAccumulator::Outcome> GradientAccumulator::AddPiece(
    uint32_t node, uint32_t offset, uint32_t count,
    absl::FunctionRef<void(uint32_t begin, uint32_t end)> fold) {
  // Elements past `required_` are layout padding: accepted, never folded.
  uint32_t begin = offset;
  uint32_t end = std::min(offset + count, required_);
  NodeState& ns = nodes_[node];
  if (ns.Covers(begin, end)) return Outcome::kDuplicate;
  if (Claimed(node, begin, end - begin)) {
    return absl::UnavailableError(absl::StrCat(
        "chunk [", offset, ", ", offset + count, ") of node 0 is still being received on another "
        "connection; retry once that ends"));
  }
  if (Overlaps(ns.received, begin, end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk [", offset, ", ", offset + count, ") of node ", node,
        " overlaps a chunk received before only in part; resend the same chunks on retry"));
  }
  // An early node's first piece needs its staging buffer, taken before
  // anything changes so that a spent budget leaves no trace. (The head's
  // pieces are folded straight into the sum: they never get here.)
  if (NeedsStaging(node, offset, count)) {
    if (staging_ == nullptr) {
      ns.staging = AlignedBuffer<float>(block_elems_);
    } else if (std::optional<AlignedBuffer<float>> taken = staging_->TryTake(block_elems_)) {
      ns.staging = *std::move(taken);
    } else {
      return Outcome::kNoStaging;
    }
  }
  Insert(ns, begin, end);  // cannot fail: checked above
  fold(begin, end);
  if (node == head_ && CoversTensors(ns)) AdvanceHead();
  AdvanceStats();
  return Outcome::kApplied;
}

bool GradientAccumulator::NeedsStaging(uint32_t node, uint32_t offset, uint32_t count) const {
  const NodeState& ns = nodes_[node];
  const uint32_t end = std::min(offset + count, required_);
  bool tensor = false;  // a piece of padding alone is never folded, so never staged
  ForEachTensorPart(offset, end, [&](uint32_t, uint32_t) { tensor = true; });
  return node != head_ && ns.staging.empty() && tensor && !ns.Covers(offset, end);
}

void GradientAccumulator::Fold(uint32_t node, uint32_t begin, uint32_t end,
                               absl::Span<const ChunkView::Segment> data, v1::DType dtype) {
  const size_t esize = DTypeSize(dtype);
  ForEachElementRun(data, esize, [&](const void* p, size_t first, size_t n) {
    const uint64_t at = begin + first;
    if (at >= end) return;  // tail padding
    const auto run_end = static_cast<uint32_t>(std::min<uint64_t>(at + n, end));
    // Only tensor elements are folded; alignment padding is skipped.
    ForEachTensorPart(static_cast<uint32_t>(at), run_end, [&](uint32_t a, uint32_t b) {
      FoldRun(node, a, b - a, static_cast<const uint8_t*>(p) + (a - at) * esize, dtype);
    });
  });
}

void GradientAccumulator::Fold(uint32_t node, uint32_t begin, uint32_t end,
                               const Int8Chunk& chunk) {
  ForEachInt8Run(chunk, [&](const Int8Run& run, size_t first, size_t n) {
    const uint64_t at = begin + first;
    if (at >= end) return;  // tail padding
    const auto run_end = static_cast<uint32_t>(std::min<uint64_t>(at + n, end));
    ForEachTensorPart(static_cast<uint32_t>(at), run_end, [&](uint32_t a, uint32_t b) {
      const Int8Run part = run.Skip(a - at);
      FoldRun(node, a, b - a, &part, v1::DTYPE_INT8);
    });
  });
}

void GradientAccumulator::FoldRun(uint32_t node, uint32_t begin, size_t n, const void* data,
                                  v1::DType dtype) {
  if (node != head_) {
    // Add gave the node its staging buffer.
    DecodeFloats(data, n, dtype, nodes_[node].staging.data() + begin);
    return;
  }
  // The last node's elements become final as they are written: squared
  // then, when they continue the final prefix (past the padding before them).
  SquareLanes* lanes = nullptr;
  if (node + 1 == num_nodes_) {
    SkipPadding(begin);
    if (begin == stats_lanes_.elems) lanes = &stats_lanes_;
  }
  if (!landed_.empty()) return Land(begin, n, data, dtype, lanes);
  float* dst = sum_.data() + begin;
  if (node == 0) {
    if (n >= kStreamElems) {
      lanes != nullptr ? DecodeFloatsStreamingSquared(data, n, dtype, dst, lanes)
                       : DecodeFloatsStreaming(data, n, dtype, dst);
      streamed_ = true;
    } else {
      lanes != nullptr ? DecodeFloatsSquared(data, n, dtype, dst, lanes)
                       : DecodeFloats(data, n, dtype, dst);
    }
  } else {
    // Every later node folds all of the sum through the cache.
    lanes != nullptr ? AccumulateFloatsSquared(data, n, dtype, dst, lanes)
                     : AccumulateFloats(data, n, dtype, dst);
    streamed_ = false;
  }
}

void GradientAccumulator::Land(uint32_t begin, size_t n, const void* data, v1::DType dtype,
                               SquareLanes* lanes) {
  uint16_t* dst = landed_.data() + begin;
  if (dtype == v1::DTYPE_BF16 && n >= kStreamElems && lanes != nullptr) {
    // A long piece that continues the squared prefix goes past the cache
    // (no read of the lines it fills), squared tile by tile from the
    // piece, in cache after its copy: the same values in the same order,
    // and nothing left for the statistics to read back. A piece out of
    // order is written through the cache, where they read it later.
    const auto* in = static_cast<const uint16_t*>(data);
    alignas(64) float tile[kTileElems];
    for (size_t at = 0; at < n; at += kTileElems) {
      const size_t k = std::min(kTileElems, n - at);
      CopyStreaming(in + at, k * sizeof(uint16_t), dst + at);
      DecodeFloatsSquared(in + at, k, v1::DTYPE_BF16, tile, lanes);
    }
    return;
  }
  if (dtype == v1::DTYPE_BF16) {
    std::memcpy(dst, data, n * sizeof(uint16_t));
  } else {
    alignas(64) float tile[kTileElems];
    const size_t esize = DTypeSize(dtype);
    for (size_t at = 0; at < n; at += kTileElems) {
      const size_t k = std::min(kTileElems, n - at);
      // DTYPE_INT8: `data` is an Int8Run (common/convert.h), moved on by run.
      Int8Run run;
      const void* src = static_cast<const uint8_t*>(data) + at * esize;
      if (dtype == v1::DTYPE_INT8) {
        run = static_cast<const Int8Run*>(data)->Skip(at);
        src = &run;
      }
      DecodeFloats(src, k, dtype, tile);
      EncodeFloats(tile, k, v1::DTYPE_BF16, dst + at);
    }
  }
  // Squared from the cache, where the piece just landed.
  if (lanes != nullptr) AddSumSquares(begin, static_cast<uint32_t>(begin + n), lanes);
}

void GradientAccumulator::AddSumSquares(uint32_t begin, uint32_t end, SquareLanes* lanes) const {
  if (landed_.empty()) return AddGradSquares(sum_.data() + begin, end - begin, lanes);
  alignas(64) float tile[kTileElems];
  for (uint32_t at = begin; at < end; at += kTileElems) {
    const size_t k = std::min<size_t>(kTileElems, end - at);
    DecodeFloatsSquared(landed_sum() + at, k, v1::DTYPE_BF16, tile, lanes);
  }
}

void GradientAccumulator::CopySum(std::string* out) const {
  out->resize(size_t{required_} * sizeof(float));
  if (landed_.empty()) {
    std::memcpy(out->data(), sum_.data(), out->size());
  } else {
    DecodeFloats(landed_sum(), required_, v1::DTYPE_BF16, reinterpret_cast<float*>(out->data()));
  }
}

void GradientAccumulator::SkipPadding(uint32_t to) {
  const uint32_t at = stats_at();
  if (at >= to || Overlaps(claimed_, at, to)) return;
  bool tensor = false;
  ForEachTensorPart(at, to, [&](uint32_t, uint32_t) { tensor = true; });
  if (!tensor) stats_lanes_.elems = to;  // zeros add nothing (common/square_lanes.h)
}

float* GradientAccumulator::Claim(uint32_t node, uint32_t offset, uint32_t count,
                                  v1::DType dtype) {
  const uint32_t end = offset + count;
  if (node != 0 || head_ != 0 || dtype != v1::DTYPE_FP32 || count == 0 || end > required_ ||
      !landed_.empty()) {
    return nullptr;
  }
  if (Overlaps(nodes_[0].received, offset, end) || Overlaps(claimed_, offset, end)) return nullptr;
  claimed_.emplace_back(offset, end);
  return sum_.data() + offset;
}

bool GradientAccumulator::Claimed(uint32_t node, uint32_t offset, uint32_t count) const {
  return node == 0 && Overlaps(claimed_, offset, offset + count);
}

bool GradientAccumulator::EndClaim(uint32_t offset, uint32_t count, uint64_t epoch) {
  auto it = std::find(claimed_.begin(), claimed_.end(), std::make_pair(offset, offset + count));
  if (epoch != epoch_ || it == claimed_.end()) return false;
  claimed_.erase(it);
  // The payload's padding landed in the sum too (its tensor elements, if
  // given back, are overwritten by the piece resent).
  ZeroPadding(offset, offset + count);
  return true;
}

bool GradientAccumulator::Commit(uint32_t offset, uint32_t count, uint64_t epoch) {
  if (!EndClaim(offset, count, epoch)) return false;
  Insert(nodes_[0], offset, offset + count);  // cannot overlap: Claim and Add saw to it
  if (head_ == 0 && CoversTensors(nodes_[0])) AdvanceHead();
  AdvanceStats();
  return true;
}

void GradientAccumulator::Abandon(uint32_t offset, uint32_t count, uint64_t epoch) {
  EndClaim(offset, count, epoch);
}

void GradientAccumulator::AdvanceHead() {
  while (head_ < num_nodes_ && CoversTensors(nodes_[head_])) {
    ++head_;
    if (head_ == num_nodes_) break;
    // The new head's pieces all arrived early: fold them now, in order
    // (their tensor elements: only those were staged).
    NodeState& next = nodes_[head_];
    if (next.staging.empty()) continue;
    for (const auto& [rb, re] : next.received) {
      ForEachTensorPart(rb, re, [&](uint32_t b, uint32_t e) {
        FoldRun(head_, b, e - b, next.staging.data() + b, v1::DTYPE_FP32);
      });
    }
    FreeStaging(next);
  }
  // A push of the new head that waits for staging needs none any more.
  if (staging_ != nullptr) staging_->Notify();
}

uint32_t GradientAccumulator::FinalEnd() const {
  if (complete()) return required_;
  if (head_ + 1 != num_nodes_) return stats_at();  // the last node is not folded yet
  // The last node's received elements are folded; padding is zero, except
  // where a claim may have written it (node 0 as the only node).
  const std::vector<std::pair<uint32_t, uint32_t>>& received = nodes_[head_].received;
  uint32_t at = stats_at();
  for (const auto& [b, e] : tensor_elems_) {
    if (e <= at) continue;
    if (at < b) {
      if (Overlaps(claimed_, at, b)) return at;
      at = b;
    }
    auto covering = std::find_if(received.begin(), received.end(),
                                 [at](const auto& r) { return r.first <= at && at < r.second; });
    if (covering == received.end()) return at;
    if (covering->second < e) return covering->second;
    at = e;
  }
  return Overlaps(claimed_, at, required_) ? at : required_;
}

void GradientAccumulator::AdvanceStats() {
  const uint32_t at = stats_at();
  const uint32_t end = FinalEnd();
  if (end <= at || (streamed_ && end - at > kReadPastStreamElems)) return;
  AddSumSquares(at, end, &stats_lanes_);
}

GradStats GradientAccumulator::Stats() const {
  SquareLanes lanes = stats_lanes_;
  AddSumSquares(static_cast<uint32_t>(lanes.elems), required_, &lanes);
  return FoldGradStats(lanes);
}

std::vector<uint32_t> GradientAccumulator::MissingNodes() const {
  std::vector<uint32_t> missing;
  for (uint32_t k = head_; k < num_nodes_; ++k) {
    if (!CoversTensors(nodes_[k])) missing.push_back(k);
  }
  return missing;
}

void GradientAccumulator::Reset() {
  head_ = 0;
  streamed_ = false;
  stats_lanes_ = SquareLanes();
  claimed_.clear();
  held_data_ = nullptr;
  held_.reset();
  ++epoch_;
  for (NodeState& ns : nodes_) {
    ns.received.clear();
    FreeStaging(ns);
  }
  // A push waiting for staging finds its step applied or restored away.
  if (staging_ != nullptr) staging_->Notify();
}

void GradientAccumulator::SetSum(const float* sum) {
  Reset();
  if (!landed_.empty()) {
    // A primary's landed gradient, widened: rounding it back is exact.
    Land(0, required_, sum, v1::DTYPE_FP32, &stats_lanes_);
    std::fill(landed_.data() + required_, landed_.data() + block_elems_, uint16_t{0});
  } else {
    // The copy squares what it writes: the statistics need no read of their own.
    DecodeFloatsSquared(sum, required_, v1::DTYPE_FP32, sum_.data(), &stats_lanes_);
    std::fill(sum_.data() + required_, sum_.data() + block_elems_, 0.0f);
  }
  head_ = num_nodes_;
}

size_t GradientAccumulator::bytes() const {
  size_t b = sum_.size() * sizeof(float) + landed_.size() * sizeof(uint16_t);
  for (const NodeState& ns : nodes_) b += ns.staging.size() * sizeof(float);
  return b;
}

}  // namespace zerostate::server
