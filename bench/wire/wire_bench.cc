// wire_bench: the compressed wire (common/int8_wire.h, docs/wire.md) on
// this host, no network.
//
// (a) Payload bytes per parameter on the wire, by direction, plain (bf16)
//     against int8, for a job of --params parameters in blocks of the
//     default size: the client's push pieces (ClientOptions' default
//     chunk_bytes, client/plan.h) and the server's gather pieces (its
//     default gather piece), each int8 piece with its own scales.
// (b) The speed of each pass the int8 wire adds, on --elems elements in
//     memory (beyond the caches), against memcpy of the same bytes in the
//     same run: the trainer's push encode (bf16 gradients plus the
//     residual, the residual written back), the server's gather encode
//     (from the bf16 copy), the server's fold (dst += decoded int8) against
//     the plain bf16 fold, and the trainer's decode into bf16 weights.
//
// --json prints one object per line:
//   {"figure":..., "value":..., "unit":..., "limit":..., "ratio":...}
// (a): value int8's bytes/param, limit bf16's, ratio limit / value.
// (b): value the pass's GB/s of the bytes it reads and writes, limit
//      memcpy's GB/s (bytes read plus written; its runs in turns with the
//      pass's), ratio value / limit, and
//      gparams_per_s its parameters per second (a 10 Gbit/s link carries
//      1.23 G int8 parameters per second).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/client.h"
#include "client/plan.h"
#include "common/convert.h"
#include "common/int8_wire.h"
#include "common/job_spec.h"
#include "common/shard_map.h"

ABSL_FLAG(uint64_t, params, 100'000'000, "parameters of the job for (a)");
ABSL_FLAG(uint64_t, elems, 1 << 25, "elements each pass of (b) runs over");
ABSL_FLAG(int, reps, 5, "runs of each pass; the fastest counts");
ABSL_FLAG(bool, json, false, "print one JSON object per figure");

namespace zerostate {
namespace {

constexpr uint32_t kServerGatherPiece = 256 * 1024;  // server/rpc/state_service.h's default

// `gparams`: parameters per second of a pass, in billions (0: none).
void Print(bool json, const std::string& figure, double value, const char* unit, double limit,
           double ratio, double gparams = 0) {
  if (json) {
    std::printf("{\"figure\":\"%s\",\"value\":%.4f,\"unit\":\"%s\",\"limit\":%.4f,"
                "\"ratio\":%.4f,\"gparams_per_s\":%.4f,\"isa\":\"%s\"}\n",
                figure.c_str(), value, unit, limit, ratio, gparams,
                std::string(IsaName(BestIsa())).c_str());
  } else {
    std::printf("%-28s %10.3f %-8s (limit %.3f, ratio %.3f; %.3f Gparams/s)\n", figure.c_str(),
                value, unit, limit, ratio, gparams);
  }
}

// Payload bytes of `elems` split in pieces of at most `piece` elements.
double Int8BytesPerParam(uint64_t params, uint32_t block, uint32_t piece) {
  uint64_t bytes = 0;
  for (const BlockPiece& p : SplitByBlock(Range{0, params}, block, piece)) {
    bytes += Int8ChunkBytes(p.count);
  }
  return static_cast<double>(bytes) / static_cast<double>(params);
}

void BytesPerParam(bool json) {
  const uint64_t params = absl::GetFlag(FLAGS_params);
  v1::JobSpec spec;
  spec.set_job_id("wire");
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(static_cast<int64_t>(params));
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(v1::DTYPE_BF16);
  spec.set_weight_dtype(v1::DTYPE_BF16);
  const uint32_t block = NormalizeJobSpec(spec)->block_elems();
  const double plain = static_cast<double>(DTypeSize(v1::DTYPE_BF16));
  const uint32_t push_piece =
      client::ChunkElems(client::ClientOptions().chunk_bytes, DTypeSize(v1::DTYPE_INT8), block);
  const double push = Int8BytesPerParam(params, block, push_piece);
  const double gather = Int8BytesPerParam(params, block, kServerGatherPiece);
  Print(json, "wire.push_bytes_per_param", push, "B/param", plain, plain / push);
  Print(json, "wire.gather_bytes_per_param", gather, "B/param", plain, plain / gather);
  Print(json, "wire.step_bytes_per_param", push + gather, "B/param", 2 * plain,
        2 * plain / (push + gather));
}

// Seconds of one run of fn.
double Time(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The fastest of `reps` runs of fn and of `limit`, taken in turns, so that
// a busy machine slows both alike.
struct Timed {
  double seconds = 1e30;
  double limit_seconds = 1e30;
};
Timed Fastest(const std::function<void()>& fn, const std::function<void()>& limit) {
  Timed best;
  for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
    best.limit_seconds = std::min(best.limit_seconds, Time(limit));
    best.seconds = std::min(best.seconds, Time(fn));
  }
  return best;
}

void Speeds(bool json) {
  const size_t n = absl::GetFlag(FLAGS_elems);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> f(n);
  for (float& x : f) x = d(rng);
  std::vector<uint16_t> bf16(n);
  EncodeFloats(f.data(), n, v1::DTYPE_BF16, bf16.data());
  std::vector<float> residual(n, 0.0f), sum(n, 0.0f);
  std::vector<uint8_t> chunk(Int8ChunkBytes(n));
  std::vector<uint8_t> copy(4 * n);
  const auto copy_fp32 = [&] { std::memcpy(copy.data(), f.data(), 4 * n); };
  auto report = [&](const std::string& name, const std::function<void()>& pass, double bytes) {
    const Timed t = Fastest(pass, copy_fp32);
    const double memcpy_gbs = 2.0 * 4 * n / t.limit_seconds / 1e9;  // read + written
    const double gbs = bytes / t.seconds / 1e9;
    Print(json, name, gbs, "GB/s", memcpy_gbs, gbs / memcpy_gbs, n / t.seconds / 1e9);
  };
  const double chunk_bytes = static_cast<double>(chunk.size());
  // Reads bf16 and the residual, writes the chunk and the residual.
  report("wire.push_encode", [&] {
           EncodeInt8(bf16.data(), v1::DTYPE_BF16, n, residual.data(), chunk.data());
         },
         2.0 * n + 8.0 * n + chunk_bytes);
  report("wire.gather_encode", [&] {
           EncodeInt8(bf16.data(), v1::DTYPE_BF16, n, nullptr, chunk.data());
         },
         2.0 * n + chunk_bytes);
  ChunkView view;
  view.data_bytes = chunk.size();
  view.data.push_back({chunk.data(), chunk.size()});
  const absl::StatusOr<Int8Chunk> read = ReadInt8Chunk(view, static_cast<uint32_t>(n));
  if (!read.ok()) {
    std::fprintf(stderr, "wire_bench: %s\n", std::string(read.status().message()).c_str());
    return;
  }
  // The fold: reads the chunk and the sum, writes the sum.
  report("wire.fold_int8", [&] {
           ForEachInt8Run(*read, [&](const Int8Run& run, size_t first, size_t count) {
             AccumulateFloats(&run, count, v1::DTYPE_INT8, sum.data() + first);
           });
         },
         chunk_bytes + 8.0 * n);
  report("wire.fold_bf16", [&] {
           AccumulateFloats(bf16.data(), n, v1::DTYPE_BF16, sum.data());
         },
         2.0 * n + 8.0 * n);
  std::vector<uint16_t> weights(n);
  report("wire.gather_decode_bf16",
         [&] { DecodeInt8Chunk(*read, v1::DTYPE_BF16, weights.data()); },
         chunk_bytes + 2.0 * n);
}

}  // namespace
}  // namespace zerostate

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const bool json = absl::GetFlag(FLAGS_json);
  zerostate::BytesPerParam(json);
  zerostate::Speeds(json);
  return 0;
}
