// The compressed wire on a job shard, without a network: int8 pushes folded
// in node order with the dequantization in the fold, the overflow check
// still seeing a NaN, int8 gathers quantized from the served copy, and
// every bad int8 chunk refused by name with nothing changed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/convert.h"
#include "common/int8_wire.h"
#include "server/core/job.h"
#include "server/core/job_registry.h"
#include "tests/server/gather_weights.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 512;

v1::RegisterJobRequest Int8Request(v1::WireFormat gradients = v1::WIRE_INT8,
                                   uint32_t nodes = 2) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("job");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(30);
  w->add_shape(30);
  auto* b = spec->add_tensors();
  b->set_name("b");
  b->add_shape(30);
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->set_num_nodes(nodes);
  spec->set_grad_dtype(v1::DTYPE_BF16);
  spec->set_weight_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(kBlock);
  spec->set_seed(5);
  spec->set_gradient_wire(gradients);
  spec->set_weight_wire(v1::WIRE_INT8);
  req.add_servers("a:1");
  req.set_shard_index(0);
  return req;
}

// An int8 chunk of g[from, from + n) (no error feedback: the test's own).
v1::Chunk Int8Chunk(uint32_t node, uint64_t block, uint32_t offset, const float* g, uint32_t n) {
  v1::Chunk c;
  c.set_job_id("job");
  c.set_node(node);
  c.set_block(block);
  c.set_offset(offset);
  c.set_dtype(v1::DTYPE_INT8);
  c.set_elems(n);
  std::string data(Int8ChunkBytes(n), '\0');
  EncodeInt8(g, v1::DTYPE_FP32, n, nullptr, reinterpret_cast<uint8_t*>(data.data()));
  c.set_data(std::move(data));
  return c;
}

// What the server makes of a chunk: its decoded elements.
std::vector<float> Decoded(const v1::Chunk& c) {
  absl::StatusOr<zerostate::Int8Chunk> read = ReadInt8Chunk(ViewOf(c), c.elems());
  EXPECT_TRUE(read.ok()) << read.status();
  std::vector<float> out(c.elems());
  if (read.ok()) DecodeInt8Chunk(*read, v1::DTYPE_FP32, out.data());
  return out;
}

class Int8WireJobTest : public ::testing::Test {
 protected:
  // `weight_copy_room`: a budget with room for the job's bf16 copy (else
  // just without it).
  explicit Int8WireJobTest(v1::WireFormat gradients = v1::WIRE_INT8, uint32_t nodes = 2,
                           bool weight_copy_room = true)
      : registry_(weight_copy_room ? 1 << 30 : LeastBytes(Int8Request(gradients, nodes))),
        pool_(2) {
    auto reg = registry_.Register(Int8Request(gradients, nodes));
    EXPECT_TRUE(reg.ok()) << reg.status();
    job_ = reg->job;
  }

  static uint64_t LeastBytes(const v1::RegisterJobRequest& req) {
    const v1::JobSpec spec = *NormalizeJobSpec(req.spec());
    return Job::EstimateBytes(spec, LayoutOf(spec).num_blocks(), TierOptions(), false);
  }

  // The bf16 copy a weight_dtype gather serves (the block's copy, or the
  // master converted), then its int8 pieces: quantized from that copy.
  void ExpectGathersQuantizeTheServedCopyPieceByPiece() {
    std::vector<uint16_t> copy;
    v1::GatherRequest req;
    req.set_dtype(v1::DTYPE_BF16);
    ASSERT_TRUE(job_->gathers()
                    .Gather(*job_->gathers().CheckGather(req), 0, v1::DTYPE_BF16, 300,
                            absl::Now() + absl::Seconds(5),
                            [&](const v1::Chunk& c) {
                              const auto* h = reinterpret_cast<const uint16_t*>(c.data().data());
                              copy.insert(copy.end(), h, h + c.data().size() / 2);
                              return true;
                            })
                    .ok());
    req.set_dtype(v1::DTYPE_INT8);
    uint64_t at = 0;
    ASSERT_TRUE(job_->gathers()
                    .Gather(*job_->gathers().CheckGather(req), 0, v1::DTYPE_INT8, 300,
                            absl::Now() + absl::Seconds(5),
                            [&](const v1::Chunk& c) {
                              EXPECT_EQ(c.block() * kBlock + c.offset(), at);
                              std::string want(Int8ChunkBytes(c.elems()), '\0');
                              EncodeInt8(copy.data() + at, v1::DTYPE_BF16, c.elems(), nullptr,
                                         reinterpret_cast<uint8_t*>(want.data()));
                              EXPECT_EQ(c.data(), want) << "piece at " << at;
                              at += c.elems();
                              return true;
                            })
                    .ok());
    EXPECT_EQ(at, job_->layout().total_elems);
    // The master stays exact: fp32 gathers serve it as before.
    EXPECT_EQ(GatherWeights(*job_, 0).size(), job_->layout().total_elems);
  }

  std::vector<float> Grad(uint32_t node) {
    std::mt19937 rng(node + 11);
    std::normal_distribution<float> d(0, 1);
    std::vector<float> g(job_->layout().total_elems);
    for (float& x : g) x = d(rng);
    return g;
  }

  // Pushes node's gradient in pieces that cut quantization groups and
  // blocks anywhere (100, then the rest of each block); returns what the
  // server decodes of it.
  std::vector<float> PushAll(uint32_t node, const std::vector<float>& g) {
    std::vector<float> decoded(g.size());
    for (uint64_t b = 0; b < job_->layout().num_blocks(); ++b) {
      for (auto [offset, n] : {std::pair<uint32_t, uint32_t>{0, 100}, {100, kBlock - 100}}) {
        const v1::Chunk c = Int8Chunk(node, b, offset, g.data() + b * kBlock + offset, n);
        auto r = job_->pushes().Push(c);
        EXPECT_TRUE(r.ok()) << r.status();
        const std::vector<float> d = Decoded(c);
        std::copy(d.begin(), d.end(), decoded.begin() + b * kBlock + offset);
      }
    }
    return decoded;
  }

  JobRegistry registry_;
  ThreadPool pool_;
  std::shared_ptr<Job> job_;
};

TEST_F(Int8WireJobTest, PushesFoldToTheNodeOrderedSumOfWhatTheyDecodeTo) {
  const auto g0 = Grad(0), g1 = Grad(1);
  const std::vector<float> d1 = PushAll(1, g1);  // node 1 first: staged, folded after node 0
  const std::vector<float> d0 = PushAll(0, g0);
  auto stats = job_->step().Stats(0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(stats.ok()) << stats.status();
  // The statistics of the sum d0 + d1 over the tensor elements, which the
  // folds computed as they wrote it: each block's, added in block order,
  // bit for bit.
  std::vector<float> sum(job_->layout().total_elems, 0.0f);
  for (const TensorSlot& t : job_->layout().tensors) {
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) sum[i] = d0[i] + d1[i];
  }
  GradStats want;
  for (uint64_t b = 0; b < job_->layout().num_blocks(); ++b) {
    const uint64_t n = std::min<uint64_t>(kBlock, job_->layout().used_elems - b * kBlock);
    want.sum_squares += ComputeGradStats(sum.data() + b * kBlock, n).sum_squares;
  }
  EXPECT_EQ(stats->sum_squares, want.sum_squares);
  EXPECT_EQ(stats->nonfinite, 0u);
}

TEST_F(Int8WireJobTest, ANaNReachesTheOverflowCheck) {
  auto g0 = Grad(0), g1 = Grad(1);
  g1[7] = std::numeric_limits<float>::quiet_NaN();
  g0[600] = std::numeric_limits<float>::infinity();
  PushAll(0, g0);
  PushAll(1, g1);
  auto stats = job_->step().Stats(0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->nonfinite, 2u);
}

TEST_F(Int8WireJobTest, GathersQuantizeTheServedCopyPieceByPiece) {
  ExpectGathersQuantizeTheServedCopyPieceByPiece();
}

// A budget with room for the job only without its bf16 copy: the int8
// pieces quantize the master converted to bf16, the same bits.
class ConvertingInt8WireJobTest : public Int8WireJobTest {
 protected:
  ConvertingInt8WireJobTest() : Int8WireJobTest(v1::WIRE_INT8, 2, /*weight_copy_room=*/false) {}
};

TEST_F(ConvertingInt8WireJobTest, GathersQuantizeTheConvertedMasterPieceByPiece) {
  EXPECT_FALSE(job_->shard().keeps_lowp_copy());
  ExpectGathersQuantizeTheServedCopyPieceByPiece();
}

void ExpectRefused(const absl::Status& s, const std::string& what) {
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find(what), std::string::npos) << s;
}

TEST_F(Int8WireJobTest, BadInt8ChunksAreRefusedByNameAndChangeNothing) {
  const auto g = Grad(0);
  const v1::Chunk good = Int8Chunk(0, 0, 0, g.data(), kBlock);
  v1::Chunk bad = good;
  (*bad.mutable_data())[1] = '\xff';  // the second group's scale byte: infinite
  ExpectRefused(job_->pushes().Push(bad).status(), "scale 1 of the int8 chunk is byte 255");
  v1::Chunk short_chunk = good;
  short_chunk.mutable_data()->pop_back();
  ExpectRefused(job_->pushes().Push(short_chunk).status(), "data: an int8 chunk of 512");
  v1::Chunk more_elems = good;
  more_elems.set_elems(kBlock - 1);
  ExpectRefused(job_->pushes().Push(more_elems).status(), "data: an int8 chunk of 511");
  v1::Chunk past = Int8Chunk(0, 0, 100, g.data(), kBlock);
  ExpectRefused(job_->pushes().Push(past).status(), "offset");
  const ShardProgress progress = job_->shard().Progress();
  EXPECT_EQ(progress.blocks_waiting, job_->layout().num_blocks());
  // Nothing was kept: the good chunk applies, not a duplicate.
  auto r = job_->pushes().Push(good);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, PushOutcome::kApplied);
}

// One node of bf16 gradients: its gradient lands as bf16 where it is
// (single-gradient mode, server/core/gradient_accumulator.h); an int8
// piece is dequantized and rounded to bf16 as it lands.
class OneNodeInt8WireJobTest : public Int8WireJobTest {
 protected:
  OneNodeInt8WireJobTest() : Int8WireJobTest(v1::WIRE_INT8, 1) {}
};

TEST_F(OneNodeInt8WireJobTest, PiecesLandAsTheBf16OfWhatTheyDecodeTo) {
  ASSERT_TRUE(LandsGradientAsBf16(job_->spec()));
  const std::vector<float> d = PushAll(0, Grad(0));
  auto stats = job_->step().Stats(0, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::vector<float> landed(job_->layout().total_elems, 0.0f);
  for (const TensorSlot& t : job_->layout().tensors) {
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) {
      landed[i] = Bf16ToFloat(FloatToBf16(d[i]));
    }
  }
  GradStats want;
  for (uint64_t b = 0; b < job_->layout().num_blocks(); ++b) {
    const uint64_t n = std::min<uint64_t>(kBlock, job_->layout().used_elems - b * kBlock);
    want.sum_squares += ComputeGradStats(landed.data() + b * kBlock, n).sum_squares;
  }
  EXPECT_EQ(stats->sum_squares, want.sum_squares);
}

class PlainWireJobTest : public Int8WireJobTest {
 protected:
  PlainWireJobTest() : Int8WireJobTest(v1::WIRE_PLAIN) {}
};

TEST_F(PlainWireJobTest, Int8ChunksNeedTheJobsGradientWire) {
  const auto g = Grad(0);
  ExpectRefused(job_->pushes().Push(Int8Chunk(0, 0, 0, g.data(), kBlock)).status(),
                "dtype: chunk is int8 but the job's grad_dtype is bf16");
  EXPECT_EQ(job_->shard().Progress().blocks_waiting, job_->layout().num_blocks());
}

TEST(Int8WireSpecTest, AnUnknownWireIsRefusedByName) {
  v1::RegisterJobRequest req = Int8Request();
  req.mutable_spec()->set_gradient_wire(static_cast<v1::WireFormat>(7));
  JobRegistry registry(1 << 30);
  auto reg = registry.Register(req);
  ExpectRefused(reg.status(), "gradient_wire: 7 is not one of WIRE_PLAIN, WIRE_INT8");
  req = Int8Request();
  req.mutable_spec()->set_weight_wire(static_cast<v1::WireFormat>(3));
  ExpectRefused(registry.Register(req).status(), "weight_wire");
}

}  // namespace
}  // namespace zerostate::server
