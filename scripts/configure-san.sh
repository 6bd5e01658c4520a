#!/usr/bin/env bash
# Configures the one clang build tree that serves every sanitizer check of
# `make test`: the C++ tests under ASan/UBSan (make test-asan), the lock
# check (-Werror=thread-safety, which only clang runs) and the libFuzzer
# harnesses (make fuzz, tests/fuzz/run.sh). One tree instead of a GCC ASan
# build and a second, clang fuzz build: the libraries are compiled once for
# all three, which is what keeps CI's `make test` under 45 minutes.
#   scripts/configure-san.sh DIR [cmake flags...]
# Does nothing when DIR is already configured. Environment: CC/CXX
# (default clang-14/clang++-14; -fsanitize=fuzzer needs clang).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/configure-san.sh DIR [cmake flags...]}
shift
[ -f "$dir/build.ninja" ] && exit 0
CC=${CC:-clang-14} CXX=${CXX:-clang++-14} cmake -S . -B "$dir" -G Ninja "$@" \
  -DZEROSTATE_SANITIZE=ON -DZEROSTATE_FUZZ=ON -DZEROSTATE_BENCH=OFF -DZEROSTATE_CUDA=OFF >/dev/null
