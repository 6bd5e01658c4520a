// The data plane's frame format (common/frame.h): a frame round-trips, and
// each malformed variant is refused with a message naming the problem.
#include "common/frame.h"

#include <gtest/gtest.h>

#include "tests/testing/frame_cases.h"

namespace zerostate {
namespace {

v1::Chunk Fields() {
  v1::Chunk c;
  c.set_job_id("job-1");
  c.set_step(7);
  c.set_node(2);
  c.set_block(3);
  c.set_offset(128);
  c.set_dtype(v1::DTYPE_BF16);
  return c;
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(FrameTest, PushFrameRoundTrips) {
  const std::string payload = "0123456789abcdef";
  const std::string frame = testing::PushFrame(Fields(), "tok", payload) + "next";
  absl::StatusOr<ParsedFrame> f = ParseFrame(Bytes(frame));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header.type, FrameType::kPush);
  EXPECT_EQ(f->size, frame.size() - 4);
  EXPECT_EQ(f->meta.token(), "tok");
  EXPECT_EQ(f->meta.chunk().SerializeAsString(), Fields().SerializeAsString());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->payload.data()), f->payload.size()),
            payload);
  ChunkView view = FrameChunkView(f->meta.chunk(), f->payload.data(), f->payload.size());
  EXPECT_EQ(view.fields.job_id, "job-1");
  EXPECT_EQ(view.fields.offset, 128u);
  EXPECT_EQ(view.data_bytes, payload.size());
}

TEST(FrameTest, HeaderFieldsAreLittleEndianAtTheirOffsets) {
  uint8_t b[kFrameHeaderBytes];
  EncodeFrameHeader({FrameType::kGatherPiece, 0x0102, 0x030405}, b);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(b), 4), "ZSDP");
  EXPECT_EQ(b[4], kFrameVersion);
  EXPECT_EQ(b[5], 4);
  EXPECT_EQ(b[8], 0x02);
  EXPECT_EQ(b[9], 0x01);
  EXPECT_EQ(b[16], 0x05);
  EXPECT_EQ(b[18], 0x03);
  absl::StatusOr<FrameHeader> h = ParseFrameHeader(b);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->meta_len, 0x0102u);
  EXPECT_EQ(h->payload_len, 0x030405u);
}

TEST(FrameTest, EachMalformedFrameIsRefusedNamingTheProblem) {
  const std::string good = testing::PushFrame(Fields(), "tok", std::string(64, 'x'));
  for (const testing::BadFrame& bad : testing::BadFrames(good)) {
    absl::StatusOr<ParsedFrame> f = ParseFrame(Bytes(bad.bytes));
    if (bad.parser_accepts) {
      EXPECT_TRUE(f.ok()) << bad.name << ": " << f.status();
      continue;
    }
    ASSERT_FALSE(f.ok()) << bad.name;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_NE(f.status().message().find(bad.error), absl::string_view::npos)
        << bad.name << ": " << f.status();
  }
}

TEST(FrameTest, TypeNames) {
  EXPECT_EQ(FrameTypeName(1), "PUSH");
  EXPECT_EQ(FrameTypeName(5), "GATHER_END");
  EXPECT_EQ(FrameTypeName(200), "type 200");
}

}  // namespace
}  // namespace zerostate
