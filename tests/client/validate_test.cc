#include "client/validate.h"

#include <gtest/gtest.h>

namespace zerostate::client {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_job_id("j");
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(1000);
  spec.set_num_nodes(2);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_weight_dtype(v1::DTYPE_FP16);
  spec.set_block_elems(256);
  return *NormalizeJobSpec(spec);
}

void ExpectInvalid(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
}

TEST(ValidateTest, GoodPushAndGatherPass) {
  v1::JobSpec spec = Spec();
  Layout layout = LayoutOf(spec);
  float buf[8];
  EXPECT_TRUE(ValidatePush(spec, layout, 1, {0, 8}, buf, v1::DTYPE_FP32).ok());
  EXPECT_TRUE(ValidatePush(spec, layout, 0, {0, 8}, buf, v1::DTYPE_BF16).ok());
  EXPECT_TRUE(ValidateGather(spec, layout, {0, 8}, buf, v1::DTYPE_FP16).ok());
  EXPECT_TRUE(ValidateGather(spec, layout, {layout.total_elems, layout.total_elems}, nullptr,
                             v1::DTYPE_FP32)
                  .ok());
}

TEST(ValidateTest, NodeOutOfRange) {
  v1::JobSpec spec = Spec();
  float buf[8];
  ExpectInvalid(ValidatePush(spec, LayoutOf(spec), 2, {0, 8}, buf, v1::DTYPE_FP32),
                "node: 2 is out of range [0, 2)");
}

TEST(ValidateTest, RangeOutsideLayout) {
  v1::JobSpec spec = Spec();
  Layout layout = LayoutOf(spec);
  float buf[8];
  ExpectInvalid(ValidatePush(spec, layout, 0, {0, layout.total_elems + 1}, buf, v1::DTYPE_FP32),
                "elems:");
  ExpectInvalid(ValidateGather(spec, layout, {9, 8}, buf, v1::DTYPE_FP32), "elems: begin 9 > end 8");
}

TEST(ValidateTest, NullBuffers) {
  v1::JobSpec spec = Spec();
  ExpectInvalid(ValidatePush(spec, LayoutOf(spec), 0, {0, 8}, nullptr, v1::DTYPE_FP32), "data:");
  ExpectInvalid(ValidateGather(spec, LayoutOf(spec), {0, 8}, nullptr, v1::DTYPE_FP32), "out:");
}

TEST(ValidateTest, DTypeMismatch) {
  v1::JobSpec spec = Spec();
  float buf[8];
  ExpectInvalid(ValidatePush(spec, LayoutOf(spec), 0, {0, 8}, buf, v1::DTYPE_FP16),
                "dtype: fp16 is neither fp32 nor the job's grad_dtype bf16");
  ExpectInvalid(ValidateGather(spec, LayoutOf(spec), {0, 8}, buf, v1::DTYPE_BF16),
                "weight_dtype fp16");
  ExpectInvalid(ValidateGather(spec, LayoutOf(spec), {0, 8}, buf, v1::DTYPE_UNSPECIFIED),
                "dtype: 0 is not a wire dtype");
}

TEST(ValidateTest, Options) {
  ClientOptions o;
  ExpectInvalid(ValidateOptions(o), "servers:");
  o.servers = {"a:1", ""};
  ExpectInvalid(ValidateOptions(o), "servers[1]");
  o.servers = {"a:1"};
  EXPECT_TRUE(ValidateOptions(o).ok());
  ClientOptions bad = o;
  bad.channels_per_server = 0;
  ExpectInvalid(ValidateOptions(bad), "channels_per_server");
  bad = o;
  bad.streams_per_server = 0;
  ExpectInvalid(ValidateOptions(bad), "streams_per_server");
  bad = o;
  bad.userspace_tls_streams_per_server = -1;
  ExpectInvalid(ValidateOptions(bad), "userspace_tls_streams_per_server");
  bad = o;
  bad.same_host_streams_per_server = -1;
  ExpectInvalid(ValidateOptions(bad), "same_host_streams_per_server");
  bad = o;
  bad.chunk_bytes = 1;
  ExpectInvalid(ValidateOptions(bad), "chunk_bytes");
  bad = o;
  bad.max_bytes_in_flight = 1024;
  ExpectInvalid(ValidateOptions(bad), "max_bytes_in_flight");
  bad = o;
  bad.rpc_timeout = std::chrono::milliseconds(0);
  ExpectInvalid(ValidateOptions(bad), "rpc_timeout");
  bad = o;
  bad.max_attempts = 0;
  ExpectInvalid(ValidateOptions(bad), "max_attempts");
  bad = o;
  bad.unavailable_wait = std::chrono::milliseconds(-1);
  ExpectInvalid(ValidateOptions(bad), "unavailable_wait");
  bad = o;
  bad.max_backoff = std::chrono::milliseconds(1);
  ExpectInvalid(ValidateOptions(bad), "backoff");
  bad = o;
  bad.keepalive_time = std::chrono::milliseconds(999);
  ExpectInvalid(ValidateOptions(bad), "keepalive_time: 999 ms");
  bad = o;
  bad.keepalive_timeout = std::chrono::milliseconds(0);
  ExpectInvalid(ValidateOptions(bad), "keepalive_timeout");
  bad.keepalive_time = std::chrono::milliseconds(0);  // off: its timeout unused
  EXPECT_TRUE(ValidateOptions(bad).ok());
  bad = o;
  bad.threads = -1;
  ExpectInvalid(ValidateOptions(bad), "threads");
}

}  // namespace
}  // namespace zerostate::client
