// A push's chunk of fp32 gradient for one block, as the tests that speak
// the proto directly build it (no zerostate client logic).
#pragma once

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::testing {

inline v1::Chunk Fp32GradChunk(const std::string& job, uint64_t step, uint32_t node,
                               uint64_t block, absl::Span<const float> values) {
  v1::Chunk c;
  c.set_job_id(job);
  c.set_step(step);
  c.set_node(node);
  c.set_block(block);
  c.set_dtype(v1::DTYPE_FP32);
  c.set_data(std::string(reinterpret_cast<const char*>(values.data()),
                         values.size() * sizeof(float)));
  return c;
}

}  // namespace zerostate::testing
