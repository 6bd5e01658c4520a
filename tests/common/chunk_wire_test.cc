#include "common/chunk_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/convert.h"

namespace zerostate {
namespace {

std::string Flatten(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` cut into slices of `step` bytes.
std::vector<grpc::Slice> Cut(const std::string& bytes, size_t step) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += step) {
    slices.emplace_back(bytes.data() + i, std::min(step, bytes.size() - i));
  }
  return slices;
}

std::string Bf16Payload(int n) {
  std::string data(2 * n, '\0');
  for (int i = 0; i < n; ++i) {
    uint16_t h = FloatToBf16(0.25f * i - 3.0f);
    std::memcpy(&data[2 * i], &h, 2);
  }
  return data;
}

TEST(ChunkWireTest, WrittenChunkParsesWithProtobuf) {
  std::string payload = Bf16Payload(100);
  ChunkFields f{"job-1", 7, 3, 123456789, 4096, v1::DTYPE_BF16, 0};
  grpc::ByteBuffer bb = MakeChunkBuffer(f, grpc::Slice(payload));
  v1::Chunk chunk;
  ASSERT_TRUE(chunk.ParseFromString(Flatten(bb)));
  EXPECT_EQ(chunk.job_id(), "job-1");
  EXPECT_EQ(chunk.step(), 7u);
  EXPECT_EQ(chunk.node(), 3u);
  EXPECT_EQ(chunk.block(), 123456789u);
  EXPECT_EQ(chunk.offset(), 4096u);
  EXPECT_EQ(chunk.dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(chunk.data(), payload);
}

TEST(ChunkWireTest, ParsesAcrossAnySliceBoundaries) {
  v1::Chunk chunk;
  chunk.set_job_id("j");
  chunk.set_block(5);
  chunk.set_offset(64);
  chunk.set_dtype(v1::DTYPE_BF16);
  chunk.set_version(9);
  chunk.set_data(Bf16Payload(333));
  std::string bytes = chunk.SerializeAsString();
  std::vector<float> want(333);
  DecodeFloats(chunk.data().data(), 333, v1::DTYPE_BF16, want.data());
  for (size_t step : {1, 2, 3, 7, 64, 100000}) {
    std::vector<grpc::Slice> slices = Cut(bytes, step);
    absl::StatusOr<ChunkView> view = ParseChunk(slices);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->fields.block, 5u);
    EXPECT_EQ(view->fields.offset, 64u);
    EXPECT_EQ(view->fields.version, 9u);
    EXPECT_EQ(view->data_bytes, 666u);
    std::vector<float> got(333);
    CopyChunkData(*view, v1::DTYPE_BF16, v1::DTYPE_FP32, got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 333 * 4)) << "slice step " << step;
    std::string raw(666, '\0');
    CopyChunkData(*view, v1::DTYPE_BF16, v1::DTYPE_BF16, raw.data());
    EXPECT_EQ(raw, chunk.data());
  }
}

TEST(ChunkWireTest, SkipsUnknownFields) {
  v1::Chunk chunk;
  chunk.set_block(2);
  chunk.set_data("abcd");
  std::string bytes = chunk.SerializeAsString();
  bytes += std::string("\xa0\x01\x05", 3);      // field 20, varint 5
  bytes += std::string("\xaa\x01\x02xy", 5);    // field 21, 2 bytes
  bytes += std::string("\xad\x01" "1234", 6);   // field 21, fixed32
  std::vector<grpc::Slice> slices = Cut(bytes, 3);
  absl::StatusOr<ChunkView> view = ParseChunk(slices);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->fields.block, 2u);
  EXPECT_EQ(view->data_bytes, 4u);
}

TEST(ChunkWireTest, TruncatedMessageIsDataLoss) {
  v1::Chunk chunk;
  chunk.set_block(2);
  chunk.set_data(std::string(100, 'x'));
  std::string bytes = chunk.SerializeAsString();
  bytes.resize(bytes.size() - 10);
  std::vector<grpc::Slice> slices = Cut(bytes, 16);
  absl::StatusOr<ChunkView> view = ParseChunk(slices);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(view.status().message().find("malformed Chunk"), absl::string_view::npos);
}

TEST(ChunkWireTest, BadWireTypeIsDataLoss) {
  std::string bytes("\x0b", 1);  // field 1, wire type 3 (group start)
  std::vector<grpc::Slice> slices = Cut(bytes, 1);
  absl::StatusOr<ChunkView> view = ParseChunk(slices);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(view.status().message().find("wire type 3"), absl::string_view::npos);
}

TEST(ChunkWireTest, ElementRunsCoverEveryElementOnceInOrder) {
  std::string payload = Bf16Payload(50);
  for (size_t step : {1, 3, 4, 7, 100}) {
    std::vector<grpc::Slice> slices = Cut(payload, step);
    std::vector<ChunkView::Segment> segments;
    for (const auto& s : slices) segments.push_back({s.begin(), s.size()});
    std::string seen;
    size_t next = 0;
    ForEachElementRun(segments, 2, [&](const void* p, size_t first, size_t n) {
      EXPECT_EQ(first, next) << "slice step " << step;
      EXPECT_GT(n, 0u);
      seen.append(static_cast<const char*>(p), 2 * n);
      next = first + n;
    });
    EXPECT_EQ(seen, payload) << "slice step " << step;
  }
}

TEST(ChunkWireTest, ViewOfAMessageMatchesItsParse) {
  v1::Chunk chunk;
  chunk.set_job_id("j");
  chunk.set_step(3);
  chunk.set_node(1);
  chunk.set_block(8);
  chunk.set_offset(16);
  chunk.set_dtype(v1::DTYPE_BF16);
  chunk.set_data(Bf16Payload(10));
  ChunkView view = ViewOf(chunk);
  std::vector<grpc::Slice> slices = Cut(chunk.SerializeAsString(), 5);
  absl::StatusOr<ChunkView> parsed = ParseChunk(slices);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (const ChunkView* v : {&view, &*parsed}) {
    EXPECT_EQ(v->fields.job_id, "j");
    EXPECT_EQ(v->fields.step, 3u);
    EXPECT_EQ(v->fields.node, 1u);
    EXPECT_EQ(v->fields.block, 8u);
    EXPECT_EQ(v->fields.offset, 16u);
    EXPECT_EQ(v->fields.dtype, v1::DTYPE_BF16);
    EXPECT_EQ(v->data_bytes, 20u);
    std::string raw(20, '\0');
    CopyChunkData(*v, v1::DTYPE_BF16, v1::DTYPE_BF16, raw.data());
    EXPECT_EQ(raw, chunk.data());
  }
}

}  // namespace
}  // namespace zerostate
