// Coverage feedback for libFuzzer from GCC-instrumented code.
//
// GCC has -fsanitize-coverage=trace-pc (a call at every basic block) and
// trace-cmp, but not the inline 8-bit counters clang's libFuzzer expects,
// and libFuzzer 14 refuses trace-pc calls. The harnesses link with
// -Wl,--wrap=__sanitizer_cov_trace_pc, so GCC's calls land here: each
// pair (previous block, this block) bumps one of kCounters 8-bit counters
// (AFL's edge hashing), which are handed to libFuzzer at start-up as an
// inline 8-bit counter region. trace-cmp goes to libFuzzer directly,
// except float and double comparisons, for which it has no hook. This
// file itself is built without instrumentation (CMakeLists.txt here).
#include <cstddef>
#include <cstdint>

namespace {

constexpr size_t kCounters = 1 << 18;
alignas(64) uint8_t counters[kCounters];
thread_local uintptr_t previous = 0;

__attribute__((constructor)) void RegisterCounters();

}  // namespace

extern "C" {
void __sanitizer_cov_8bit_counters_init(uint8_t* start, uint8_t* stop);

void __wrap___sanitizer_cov_trace_pc() {
  uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  uintptr_t here = (pc ^ (pc >> 17)) & (kCounters - 1);
  ++counters[here ^ previous];
  previous = here >> 1;
}

void __sanitizer_cov_trace_cmpf(float, float) {}
void __sanitizer_cov_trace_cmpd(double, double) {}
}

namespace {
void RegisterCounters() { __sanitizer_cov_8bit_counters_init(counters, counters + kCounters); }
}  // namespace
