// Helpers shared by the harnesses: a small job like the one
// tests/server/job_test.cc drives, and the framing that turns one fuzz
// input into a sequence of messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/core/job.h"
#include "server/core/job_registry.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::fuzz {

namespace v1 = ::zerostate::v1;

// RAM budget of every registry the harnesses build: large enough for the
// small job, small enough that huge specs are refused, not allocated.
inline constexpr uint64_t kRamBudget = 64ull << 20;

// Job "job": tensors w [20, 30] and b [20] in blocks of 256 elements
// (3 blocks), AdamW, fp32 gradients, bf16 low-precision copy.
inline v1::RegisterJobRequest SmallJobRequest(uint32_t nodes, bool streamed_init) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("job");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(20);
  w->add_shape(30);
  auto* b = spec->add_tensors();
  b->set_name("b");
  b->add_shape(20);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->mutable_optimizer()->set_weight_decay(0.01f);
  spec->set_num_nodes(nodes);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(256);
  spec->set_streamed_init(streamed_init);
  spec->set_seed(5);
  req.add_servers("a:1");
  req.set_shard_index(0);
  return req;
}

// Registers the small job in `registry`; aborts if the project refuses
// it (the harness would test nothing).
inline std::shared_ptr<server::Job> SmallJob(server::JobRegistry& registry, uint32_t nodes,
                                             bool streamed_init) {
  auto reg = registry.Register(SmallJobRequest(nodes, streamed_init));
  if (!reg.ok()) __builtin_trap();
  return reg->job;
}

// One framed record of a fuzz input: a tag byte, a 16-bit little-endian
// length, then that many bytes (fewer at the end of the input).
struct Record {
  uint8_t tag;
  std::string bytes;
};

inline std::vector<Record> SplitRecords(const uint8_t* data, size_t size) {
  std::vector<Record> out;
  size_t pos = 0;
  while (pos + 3 <= size) {
    uint8_t tag = data[pos];
    size_t len = data[pos + 1] | (static_cast<size_t>(data[pos + 2]) << 8);
    pos += 3;
    if (len > size - pos) len = size - pos;
    out.push_back({tag, std::string(reinterpret_cast<const char*>(data + pos), len)});
    pos += len;
  }
  return out;
}

// The inverse of SplitRecords, for corpus generators.
inline std::string FrameRecord(uint8_t tag, const std::string& bytes) {
  std::string out(3, '\0');
  out[0] = static_cast<char>(tag);
  out[1] = static_cast<char>(bytes.size() & 0xff);
  out[2] = static_cast<char>((bytes.size() >> 8) & 0xff);
  return out + bytes;
}

}  // namespace zerostate::fuzz
