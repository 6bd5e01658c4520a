// The state of N parameters laid out as a server's blocks, and the passes
// over it that optimizer_bench and step_bench time: the memory limit of an
// AdamW step (TrafficPass) with a given number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "server/core/optimizer/optimizer.h"

namespace zerostate::server {

// Parameters per block, as a job's default block_elems.
constexpr size_t kBenchBlockElems = 262144;
// Bytes an AdamW step moves per parameter: reads p, g, m, v (16 B); writes
// p, m, v and the bf16 copy (14 B).
constexpr double kStepBytesPerParam = 16 + 14;

// Runs work(block) for every block, on `threads` threads that take blocks
// from a shared counter as the server's pool does; returns the wall time in
// seconds.
double RunBlocks(int threads, size_t num_blocks, const std::function<void(size_t)>& work);

// p, g, m, v and a bf16 copy of N parameters, 4 KiB aligned.
class StepState {
 public:
  explicit StepState(size_t n);
  ~StepState();
  StepState(const StepState&) = delete;
  StepState& operator=(const StepState&) = delete;

  // False when an allocation failed (then nothing else may be called).
  bool ok() const { return p_ && g_ && m_ && v_ && lowp_; }
  size_t params() const { return n_; }
  size_t num_blocks() const { return (n_ + kBenchBlockElems - 1) / kBenchBlockElems; }
  BlockRefs Block(size_t b) const;

  // Normal, finite values (no denormals to slow the arithmetic), written by
  // the threads that will use them.
  void Fill(int threads);

 private:
  size_t n_;
  float* p_;
  float* g_;
  float* m_;
  float* v_;
  uint16_t* lowp_;
};

// Bytes an AdamW step with bf16 weights moves per parameter when its
// moments are stored in `format` (reads p, g and the moments with int8's
// scales; writes p, the moments and the bf16 copy): 30 for fp32, 22 for
// bf16, 18 + 16/2048 for int8; 2 fewer when it reads the gradient as bf16
// where it landed (`grad_bf16`, the single-gradient pass).
double StepBytesPerParam(MomentFormat format, bool grad_bf16 = false);

// N parameters laid out as a server's RAM tier holds them with compact
// moments: each block's state (StateLayout of kBenchBlockElems elements)
// in one array, and the gradient sums and bf16 copies.
class CompactStepState {
 public:
  CompactStepState(size_t n, MomentFormat format);
  ~CompactStepState();
  CompactStepState(const CompactStepState&) = delete;
  CompactStepState& operator=(const CompactStepState&) = delete;

  bool ok() const { return state_ && g_ && gh_ && lowp_; }
  size_t params() const { return n_; }
  size_t num_blocks() const { return (n_ + kBenchBlockElems - 1) / kBenchBlockElems; }
  // `grad_bf16`: the gradient as bf16 (BlockRefs::grad_bf16), the same
  // values as the fp32 one.
  BlockRefs Block(size_t b, bool grad_bf16 = false) const;
  // As StepState::Fill, the moments zero.
  void Fill(int threads);

 private:
  size_t n_;
  StateLayout layout_;
  float* state_;
  float* g_;
  uint16_t* gh_;
  uint16_t* lowp_;
};

// One pass of pass(block) over every block with `threads` threads; seconds.
double PassSeconds(int threads, const StepState& s,
                   const std::function<void(const BlockRefs&)>& pass);

// The memory limit: the best of `reps` TrafficPass passes (after one
// warm-up) with the widest ISA and `threads` threads, in parameters per
// second. REQUIRES: s.ok(), reps >= 1.
double MemoryLimitParamsPerSecond(const StepState& s, int threads, int reps);

}  // namespace zerostate::server
