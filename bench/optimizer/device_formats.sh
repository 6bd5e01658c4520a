#!/bin/bash
# The AdamW step per moment format (optimizer_bench --formats_only) at 1
# thread and at one thread per core, against the memory limit of the same
# run, for builds taking turns (2 rounds): by default BIN_DIR/optimizer_bench
# (this branch, "quant") and BIN_DIR/optimizer_bench_main (main's, bundled
# under that name); BUILDS names others ("quant" is optimizer_bench, any
# other NAME optimizer_bench_NAME). On the GPU machine's CPU cores, clean
# of the development machine's other work. Each per-format figure names
# its kernel table ("kernels").
# Bundle: ../shared/tools/device-bundle .device build/bench/optimizer/optimizer_bench
#         and main's binary copied to .device/bin/optimizer_bench_main
# Usage: [BUILDS="quant main"] bench/optimizer/device_formats.sh OUT [BIN_DIR]
#   (BIN_DIR: .device/bin) writes OUT/optimizer_formats_<build>_{1,2}.json,
#   OUT/lscpu.txt and OUT/summary.txt (bench/optimizer/formats_summary.py);
#   PARAMS overrides the parameter count (default 64M; a smaller one to try
#   it out here).
set -euo pipefail
out=${1:?usage: bench/optimizer/device_formats.sh OUT [BIN_DIR]}
bin=${2:-.device/bin}
params=${PARAMS:-$((64 << 20))}
mkdir -p "$out"
[[ -f .device/env.sh ]] && source .device/env.sh
lscpu >"$out/lscpu.txt"
for round in 1 2; do
  for build in ${BUILDS:-quant main}; do
    exe="$bin/optimizer_bench"
    [[ $build != quant ]] && exe="$bin/optimizer_bench_$build"
    "$exe" --formats_only --json --params="$params" --reps=3 --threads="$(nproc)" \
      >"$out/optimizer_formats_${build}_${round}.json"
  done
done
python3 "$(dirname "$0")/formats_summary.py" "$out"/optimizer_formats_*.json | tee "$out/summary.txt"
