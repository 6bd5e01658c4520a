#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang and runs each for a bounded time,
# from a copy of its seed corpus in tests/fuzz/corpus/<harness>/. The build
# tree is the one sanitizer tree of `make test` (scripts/configure-san.sh:
# clang, ASan+UBSan, fuzz harnesses), which `make test-asan` builds and tests
# in first; run alone, this configures it if need be and builds only the
# harnesses and the libraries no harness links (the client's,
# tests/fuzz/CMakeLists.txt's zerostate_lock_check), so that this one build
# checks every server, common and client lock annotation (-Werror=thread-safety,
# CMakeLists.txt at the top): a lock finding fails the build, and this script.
#   tests/fuzz/run.sh [seconds-per-harness] [harness...]
# Defaults: 60 s, every harness. `make test` runs it with 10 s (CI).
# Fails (exit 1) on any lock finding, crash, leak, timeout, out-of-memory or
# sanitizer report; the reproducer is left in $FUZZ_OUT/<harness>/ (default
# build-san/fuzz-out) and named in the log. Environment: BUILD (build
# dir, default build-san), CMAKE_FLAGS (more cmake flags when it configures),
# CXX/CC (compiler, default clang++-14/clang-14; the harnesses need clang's
# -fsanitize=fuzzer), JOBS (build jobs, default 2), FUZZ_PAR (harnesses run
# at once, default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
shift || true
ALL=(register_job chunk gather frame step rendezvous manifest worker_config ds_config tls_stream)
[ $# -gt 0 ] && HARNESSES=("$@") || HARNESSES=("${ALL[@]}")
BUILD=${BUILD:-build-san}
OUT=${FUZZ_OUT:-$BUILD/fuzz-out}

# CMAKE_FLAGS: words on purpose (several flags in one variable, as in the Makefile).
# shellcheck disable=SC2086
scripts/configure-san.sh "$BUILD" ${CMAKE_FLAGS:-}
# zerostate_lock_check: the libraries no harness links, built for their lock check.
cmake --build "$BUILD" -j "${JOBS:-2}" --target "${HARNESSES[@]/#/fuzz_}" zerostate_lock_check

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
# Runs harness $1; prints its summary in one piece when done; fails on any finding.
fuzz_one() {
  local h=$1 work="$OUT/$1" rc=0
  rm -rf "$work" && mkdir -p "$work/corpus"
  # Fuzz a copy, so that the seeds in the tree stay as written.
  cp tests/fuzz/corpus/"$h"/* "$work/corpus/"
  "$BUILD/tests/fuzz/fuzz_$h" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2560 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$work/" \
      "$work/corpus" >"$work/log" 2>&1 || rc=$?
  {
    if (( rc == 0 )); then
      echo "== fuzz_$h: ${SECS}s ok"
      grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$work/log" || true
      grep -E "#[0-9]+.*(DONE|pulse)" "$work/log" | tail -1 || true
    else
      echo "!! fuzz_$h FAILED (exit $rc); see $work/log"
      grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$work/log" | head -5 || true
    fi
  } >"$work/summary"
  cat "$work/summary"
  echo "$rc" >"$work/rc"
}

for h in "${HARNESSES[@]}"; do
  while (( $(jobs -rp | wc -l) >= ${FUZZ_PAR:-2} )); do wait -n || true; done
  fuzz_one "$h" &
done
wait
status=0
for h in "${HARNESSES[@]}"; do
  [ "$(cat "$OUT/$h/rc" 2>/dev/null)" = 0 ] || status=1
done
exit $status
