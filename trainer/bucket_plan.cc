#include "trainer/bucket_plan.h"

#include <algorithm>

namespace zerostate::trainer {

std::vector<Range> BackwardBuckets(const Layout& layout, std::vector<uint64_t> ready_points,
                                   uint64_t max_elems) {
  const uint64_t b = layout.block_elems;
  const uint64_t cap = max_elems == 0 ? 0 : (max_elems + b - 1) / b * b;
  std::vector<uint64_t> cuts;
  for (uint64_t p : ready_points) cuts.push_back(std::min((p + b - 1) / b * b, layout.used_elems));
  cuts.push_back(0);
  std::sort(cuts.begin(), cuts.end(), std::greater<>());
  std::vector<Range> buckets;
  // The bucket being grown is [begin, end): it takes in the pieces under
  // it while it stays within the cap.
  uint64_t end = layout.used_elems;
  uint64_t begin = end;
  for (uint64_t cut : cuts) {
    if (cut >= begin) continue;
    if (cap != 0 && end - cut <= cap) {
      begin = cut;
      continue;
    }
    if (begin < end) buckets.push_back(Range{begin, end});
    end = begin;
    // [cut, end) in pieces of `cap` from `cut` on, the highest first; one
    // within the cap grows on.
    uint64_t pieces = cap == 0 ? 1 : (end - cut + cap - 1) / cap;
    if (pieces == 1 && cap != 0) {
      begin = cut;
      continue;
    }
    while (pieces-- > 0) {
      const uint64_t low = cap == 0 ? cut : cut + pieces * cap;
      buckets.push_back(Range{low, end});
      end = low;
    }
    begin = end;
  }
  if (begin < end) buckets.push_back(Range{begin, end});
  return buckets;
}

uint64_t LocalChunk(Range bucket, uint32_t ranks) {
  const uint64_t units = (bucket.size() + kTensorAlignElems - 1) / kTensorAlignElems;
  return (units + ranks - 1) / ranks * kTensorAlignElems;
}

Range LocalShare(Range bucket, uint32_t ranks, uint32_t rank) {
  const uint64_t chunk = LocalChunk(bucket, ranks);
  return Range{std::min(bucket.begin + chunk * rank, bucket.end),
               std::min(bucket.begin + chunk * (rank + 1), bucket.end)};
}

std::vector<PlannedBucket> PlanBuckets(const Layout& layout, std::vector<uint64_t> ready_points,
                                       uint64_t max_elems, uint32_t ranks, uint32_t rank) {
  std::vector<PlannedBucket> plan;
  uint64_t staging = 0;
  for (Range elems : BackwardBuckets(layout, std::move(ready_points), max_elems)) {
    const Range share = LocalShare(elems, ranks, rank);
    plan.push_back(PlannedBucket{elems, share, staging});
    staging += share.size();
  }
  return plan;
}

}  // namespace zerostate::trainer
