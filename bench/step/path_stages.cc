#include "bench/step/path_stages.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/convert.h"
#include "common/square_lanes.h"
#include "server/core/optimizer/optimizer.h"

namespace zerostate::bench {
namespace {

using Clock = std::chrono::steady_clock;

template <class T>
T* AllocAligned(size_t n) {
  const size_t bytes = (n * sizeof(T) + 4095) / 4096 * 4096;
  return static_cast<T*>(std::aligned_alloc(4096, bytes));
}

// work(piece) for every piece on `threads` threads taking pieces from a
// shared counter, as the server's pool does.
void RunPieces(int threads, size_t pieces, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < pieces;) work(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

PathStage CpuStage(std::string name, double bytes, size_t pieces, std::function<void(size_t)> work) {
  PathStage s;
  s.name = std::move(name);
  s.bytes_per_param = bytes;
  s.pieces = pieces;
  s.work = std::move(work);
  return s;
}

PathStage DmaStage(std::string name, double bytes, size_t pieces,
                   std::function<absl::Status(size_t, size_t)> copy) {
  PathStage s;
  s.name = std::move(name);
  s.bytes_per_param = bytes;
  s.pieces = pieces;
  s.dma = true;
  s.copy = std::move(copy);
  return s;
}

server::StepParams AdamW() {
  server::StepParams p;
  p.config.set_kind(v1::OPTIMIZER_ADAMW);
  p.config.set_beta1(0.9f);
  p.config.set_beta2(0.999f);
  p.config.set_eps(1e-8f);
  p.config.set_weight_decay(0.01f);
  p.lr = 1e-3f;
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PathBuffers>> PathBuffers::Create(size_t params, v1::DType wire,
                                                                 int threads) {
  if (wire != v1::DTYPE_FP32 && wire != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("wire dtype ", v1::DType_Name(wire), ": the path runs fp32 or bf16"));
  }
  std::unique_ptr<PathBuffers> b(new PathBuffers(params, wire));
  if (!b->Allocate(threads)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the path's buffers for ", params, " parameters"));
  }
  b->BuildStages();
  return b;
}

PathBuffers::~PathBuffers() {
  for (void* ptr : {static_cast<void*>(p_), static_cast<void*>(m_), static_cast<void*>(v_),
                    static_cast<void*>(sum_), static_cast<void*>(lowp_)}) {
    std::free(ptr);
  }
  if (dma_ == nullptr) {
    std::free(grad_staging_);
    std::free(gather_staging_);
  }
}

bool PathBuffers::Allocate(int threads) {
  wire_bytes_ = wire_ == v1::DTYPE_BF16 ? 2 : 4;
  const size_t n = params_;
  p_ = AllocAligned<float>(n);
  m_ = AllocAligned<float>(n);
  v_ = AllocAligned<float>(n);
  sum_ = AllocAligned<float>(n);
  if (wire_ == v1::DTYPE_BF16) lowp_ = AllocAligned<uint16_t>(n);
  auto dma = DmaStaging::Create(n * wire_bytes_);
  if (dma.ok()) {
    dma_ = *std::move(dma);
    grad_staging_ = dma_->grad_staging();
    gather_staging_ = dma_->gather_staging();
  } else {
    dma_status_ = dma.status();
    if (dma_status_.code() == absl::StatusCode::kResourceExhausted) return false;
    grad_staging_ = AllocAligned<uint8_t>(n * wire_bytes_);
    gather_staging_ = AllocAligned<uint8_t>(n * wire_bytes_);
  }
  if (!p_ || !m_ || !v_ || !sum_ || (wire_ == v1::DTYPE_BF16 && !lowp_) || !grad_staging_ ||
      !gather_staging_)
    return false;
  // Normal, finite values, written by the threads that will use them.
  const size_t pieces = (n + kPieceElems - 1) / kPieceElems;
  RunPieces(threads, pieces, [&](size_t piece) {
    const size_t begin = piece * kPieceElems, end = std::min(n, begin + kPieceElems);
    for (size_t i = begin; i < end; ++i) {
      const float x = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
      p_[i] = 0.5f + x;
      m_[i] = 0;
      v_[i] = 0;
      sum_[i] = x - 0.5f;
      if (lowp_ != nullptr) lowp_[i] = 0;
    }
    EncodeFloats(sum_ + begin, end - begin, wire_, static_cast<uint8_t*>(grad_staging_) + begin * wire_bytes_);
    std::memset(static_cast<uint8_t*>(gather_staging_) + begin * wire_bytes_, 0,
                (end - begin) * wire_bytes_);
  });
  return true;
}

void PathBuffers::BuildStages() {
  const size_t n = params_, w = wire_bytes_;
  const size_t pieces = (n + kPieceElems - 1) / kPieceElems;
  auto range = [n](size_t piece) {
    const size_t begin = piece * kPieceElems;
    return std::pair{begin, std::min(n, begin + kPieceElems) - begin};
  };
  // Byte offset and size of pieces [begin, end) in a wire buffer.
  auto bytes_of = [n, w](size_t begin, size_t end) {
    const size_t from = begin * kPieceElems;
    return std::pair{from * w, (std::min(n, end * kPieceElems) - from) * w};
  };
  if (dma_ != nullptr) {
    stages_.push_back(DmaStage("d2h", double(w), pieces, [this, bytes_of](size_t begin, size_t end) {
      auto [offset, bytes] = bytes_of(begin, end);
      return dma_->CopyD2h(offset, bytes);
    }));
  }
  stages_.push_back(CpuStage("fold", double(w + 4), pieces, [this, range, w](size_t piece) {
                       auto [begin, count] = range(piece);
                       SquareLanes lanes;
                       DecodeFloatsStreamingSquared(static_cast<const uint8_t*>(grad_staging_) + begin * w,
                                                    count, wire_, sum_ + begin, &lanes);
                     }));
  const server::StepParams adamw = AdamW();
  stages_.push_back(CpuStage("pass", lowp_ != nullptr ? 30.0 : 28.0, pieces,
                     [this, range, adamw](size_t piece) {
                       auto [begin, count] = range(piece);
                       server::BlockRefs r;
                       r.param = p_ + begin;
                       r.m = m_ + begin;
                       r.v = v_ + begin;
                       r.grad = sum_ + begin;
                       if (lowp_ != nullptr) {
                         r.lowp = lowp_ + begin;
                         r.lowp_dtype = v1::DTYPE_BF16;
                       }
                       r.n = count;
                       server::StepBlock(adamw, r);
                     }));
  stages_.push_back(CpuStage("gather", double(2 * w), pieces, [this, range, w](size_t piece) {
                       auto [begin, count] = range(piece);
                       const void* from = lowp_ != nullptr ? static_cast<const void*>(lowp_ + begin)
                                                           : static_cast<const void*>(p_ + begin);
                       std::memcpy(static_cast<uint8_t*>(gather_staging_) + begin * w, from, count * w);
                     }));
  if (dma_ != nullptr) {
    stages_.push_back(DmaStage("h2d", double(w), pieces, [this, bytes_of](size_t begin, size_t end) {
      auto [offset, bytes] = bytes_of(begin, end);
      return dma_->CopyH2d(offset, bytes);
    }));
  }
}

const PathStage* PathBuffers::stage(const std::string& name) const {
  for (const PathStage& s : stages_)
    if (s.name == name) return &s;
  return nullptr;
}

absl::StatusOr<AtOnce> RunAtOnce(const std::vector<const PathStage*>& stages,
                                 const std::vector<int>& threads) {
  struct Run {
    std::atomic<size_t> next{0};
    std::atomic<int> running{0};
    Clock::time_point end;
  };
  std::vector<Run> runs(stages.size());
  int total = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const int t = stages[i]->dma ? 1 : std::max(1, threads[i]);
    runs[i].running = t;
    total += t;
  }
  // Every thread ready, then the clock, then all released: a stage cannot
  // begin before the start it is timed from.
  std::latch ready(total), go(1);
  absl::Mutex mu;
  absl::Status failed;
  std::vector<std::thread> pool;
  for (size_t i = 0; i < stages.size(); ++i) {
    const PathStage& s = *stages[i];
    Run& run = runs[i];
    for (int t = run.running.load(); t > 0; --t) {
      pool.emplace_back([&] {
        ready.count_down();
        go.wait();
        if (s.dma) {
          if (absl::Status st = s.copy(0, s.pieces); !st.ok()) {
            absl::MutexLock lock(&mu);
            failed.Update(st);
          }
        } else {
          for (size_t p; (p = run.next.fetch_add(1, std::memory_order_relaxed)) < s.pieces;) s.work(p);
        }
        const Clock::time_point now = Clock::now();
        if (run.running.fetch_sub(1) == 1) run.end = now;
      });
    }
  }
  ready.wait();
  const Clock::time_point start = Clock::now();
  go.count_down();
  for (std::thread& t : pool) t.join();
  if (!failed.ok()) return failed;
  AtOnce out;
  for (const Run& run : runs) {
    out.stage_seconds.push_back(std::chrono::duration<double>(run.end - start).count());
    out.seconds = std::max(out.seconds, out.stage_seconds.back());
  }
  return out;
}

}  // namespace zerostate::bench
