#include "bench/optimizer/step_state.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/convert.h"

namespace zerostate::server {
namespace {

template <class T>
T* AllocAligned(size_t n) {
  const size_t bytes = (n * sizeof(T) + 4095) / 4096 * 4096;
  return static_cast<T*>(std::aligned_alloc(4096, bytes));
}

}  // namespace

double RunBlocks(int threads, size_t num_blocks, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < num_blocks;) work(b);
    });
  }
  for (std::thread& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

StepState::StepState(size_t n)
    : n_(n),
      p_(AllocAligned<float>(n)),
      g_(AllocAligned<float>(n)),
      m_(AllocAligned<float>(n)),
      v_(AllocAligned<float>(n)),
      lowp_(AllocAligned<uint16_t>(n)) {}

StepState::~StepState() {
  for (void* ptr : {static_cast<void*>(p_), static_cast<void*>(g_), static_cast<void*>(m_),
                    static_cast<void*>(v_), static_cast<void*>(lowp_)}) {
    std::free(ptr);
  }
}

BlockRefs StepState::Block(size_t b) const {
  const size_t begin = b * kBenchBlockElems;
  BlockRefs r;
  r.param = p_ + begin;
  r.m = m_ + begin;
  r.v = v_ + begin;
  r.grad = g_ + begin;
  r.lowp = lowp_ + begin;
  r.lowp_dtype = v1::DTYPE_BF16;
  r.n = std::min(kBenchBlockElems, n_ - begin);
  return r;
}

void StepState::Fill(int threads) {
  RunBlocks(threads, num_blocks(), [this](size_t b) {
    const BlockRefs r = Block(b);
    for (size_t i = 0; i < r.n; ++i) {
      const float x = static_cast<float>(((b * kBenchBlockElems + i) * 2654435761u) % 1000) * 1e-3f;
      r.param[i] = 0.5f + x;
      r.m[i] = 0;
      r.v[i] = 0;
      const_cast<float*>(r.grad)[i] = x - 0.5f;
      static_cast<uint16_t*>(r.lowp)[i] = 0;
    }
  });
}

double StepBytesPerParam(MomentFormat format, bool grad_bf16) {
  const StateLayout l{kBenchBlockElems, 2, format};
  const double moments = 4.0 * (l.total_floats() - l.m_offset()) / kBenchBlockElems;
  return (4 + (grad_bf16 ? 2 : 4) + moments) + (4 + moments + 2);
}

CompactStepState::CompactStepState(size_t n, MomentFormat format)
    : n_(n),
      layout_{static_cast<uint32_t>(kBenchBlockElems), 2, format},
      state_(AllocAligned<float>(num_blocks() * layout_.total_floats())),
      g_(AllocAligned<float>(n)),
      gh_(AllocAligned<uint16_t>(n)),
      lowp_(AllocAligned<uint16_t>(n)) {}

CompactStepState::~CompactStepState() {
  for (void* ptr : {static_cast<void*>(state_), static_cast<void*>(g_), static_cast<void*>(gh_),
                    static_cast<void*>(lowp_)}) {
    std::free(ptr);
  }
}

BlockRefs CompactStepState::Block(size_t b, bool grad_bf16) const {
  const size_t begin = b * kBenchBlockElems;
  BlockRefs r = StateRefs(layout_, state_ + b * layout_.total_floats());
  if (grad_bf16) {
    r.grad_bf16 = gh_ + begin;
  } else {
    r.grad = g_ + begin;
  }
  r.lowp = lowp_ + begin;
  r.lowp_dtype = v1::DTYPE_BF16;
  r.n = std::min(kBenchBlockElems, n_ - begin);
  return r;
}

void CompactStepState::Fill(int threads) {
  RunBlocks(threads, num_blocks(), [this](size_t b) {
    const BlockRefs r = Block(b);
    std::memset(r.param, 0, layout_.total_floats() * sizeof(float));
    for (size_t i = 0; i < r.n; ++i) {
      const float x = static_cast<float>(((b * kBenchBlockElems + i) * 2654435761u) % 1000) * 1e-3f;
      r.param[i] = 0.5f + x;
      const uint16_t g = FloatToBf16(x - 0.5f);
      const_cast<float*>(r.grad)[i] = Bf16ToFloat(g);
      gh_[b * kBenchBlockElems + i] = g;
      static_cast<uint16_t*>(r.lowp)[i] = 0;
    }
  });
}

double PassSeconds(int threads, const StepState& s,
                   const std::function<void(const BlockRefs&)>& pass) {
  return RunBlocks(threads, s.num_blocks(), [&](size_t b) { pass(s.Block(b)); });
}

double MemoryLimitParamsPerSecond(const StepState& s, int threads, int reps) {
  const Isa isa = SupportedIsas().back();
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const double sec = PassSeconds(threads, s, [&](const BlockRefs& b) { TrafficPass(isa, b); });
    if (r > 0) best = std::min(best, sec);
  }
  return static_cast<double>(s.params()) / best;
}

}  // namespace zerostate::server
