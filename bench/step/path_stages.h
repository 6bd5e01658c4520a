// The memory stages of one step of our same-host path (the trainer's GPU,
// one server on the same host, the shared-memory data plane with shared
// staging), as path_floor_bench runs them, each over its own buffers of N
// parameters at one wire dtype, with the kernels the server runs:
//   d2h     the GPU writes the gradient into pinned staging    (w B)
//   fold    the staging becomes the fp32 sum: the first node's
//           fold, DecodeFloatsStreamingSquared                  (w + 4 B)
//   pass    AdamW's StepBlock: reads p, sum, m, v, writes p, m,
//           v and, with bf16 on the wire, the bf16 copy         (28 / 30 B)
//   gather  the weights the client gathers, copied into pinned
//           staging (the bf16 copy, or the fp32 weights)        (2w B)
//   h2d     the GPU reads them from the staging                 (w B)
// (w: 2 for bf16, 4 for fp32.) No stage waits for another: the buffers are
// independent, so running them at once measures what the host's memory
// gives the path's bytes with no dependency between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/step/path_dma.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::bench {

// Parameters per piece of work a CPU stage's threads take (a server block).
constexpr size_t kPieceElems = 262144;

// One stage over `pieces` pieces of kPieceElems parameters: a CPU stage's
// threads take pieces one at a time; a DMA stage's one thread copies ranges
// of pieces.
struct PathStage {
  std::string name;
  double bytes_per_param = 0;  // host memory traffic, read + write
  size_t pieces = 0;
  bool dma = false;
  std::function<void(size_t piece)> work;                      // CPU stages
  std::function<absl::Status(size_t begin, size_t end)> copy;  // DMA: pieces [begin, end), waited for
};

// The buffers of every stage for `params` parameters at `wire` (FP32 or
// BF16), first touched by `threads` threads, and the stages over them.
class PathBuffers {
 public:
  // ResourceExhausted when an allocation fails; the DMA stages are absent
  // (dma_status() says why) when there is no GPU or no CUDA in the build.
  static absl::StatusOr<std::unique_ptr<PathBuffers>> Create(size_t params, v1::DType wire,
                                                             int threads);
  ~PathBuffers();
  PathBuffers(const PathBuffers&) = delete;
  PathBuffers& operator=(const PathBuffers&) = delete;

  // d2h, fold, pass, gather, h2d (the DMA stages only when the GPU is there).
  const std::vector<PathStage>& stages() const { return stages_; }
  const PathStage* stage(const std::string& name) const;
  const absl::Status& dma_status() const { return dma_status_; }
  size_t params() const { return params_; }

 private:
  PathBuffers(size_t params, v1::DType wire) : params_(params), wire_(wire) {}
  bool Allocate(int threads);
  void BuildStages();

  size_t params_;
  v1::DType wire_;
  size_t wire_bytes_ = 0;
  float* p_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* sum_ = nullptr;
  uint16_t* lowp_ = nullptr;  // the bf16 copy (bf16 wire only)
  std::unique_ptr<DmaStaging> dma_;  // pinned staging and the GPU's buffers
  void* grad_staging_ = nullptr;     // pinned when dma_, else plain memory
  void* gather_staging_ = nullptr;
  absl::Status dma_status_;
  std::vector<PathStage> stages_;
};

// Seconds from the common start to each stage's end, and to the last.
struct AtOnce {
  std::vector<double> stage_seconds;
  double seconds = 0;
};

// Runs `stages` at once, CPU stage i on threads[i] threads (DMA stages on
// one thread each, which copies every piece and waits), all released
// together.
absl::StatusOr<AtOnce> RunAtOnce(const std::vector<const PathStage*>& stages,
                                 const std::vector<int>& threads);

}  // namespace zerostate::bench
