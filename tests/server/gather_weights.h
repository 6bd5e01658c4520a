// Test helper: a job shard's fp32 master weights, read through JobGathers::Gather
// as the service reads them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "server/core/job.h"

namespace zerostate::server {

// The shard's weights at version `min_version` or later, in flat order;
// a failed gather is a test failure (and a short answer).
inline std::vector<float> GatherWeights(Job& job, uint64_t min_version) {
  std::vector<float> out;
  v1::GatherRequest req;
  req.set_dtype(v1::DTYPE_FP32);
  auto s = job.gathers().Gather(*job.gathers().CheckGather(req), min_version, v1::DTYPE_FP32, 100,
                                absl::Now() + absl::Seconds(5), [&](const v1::Chunk& c) {
                                  const float* f = reinterpret_cast<const float*>(c.data().data());
                                  out.insert(out.end(), f, f + c.data().size() / 4);
                                  return true;
                                });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

}  // namespace zerostate::server
