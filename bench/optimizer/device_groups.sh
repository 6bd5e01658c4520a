#!/bin/bash
# The fused AdamW step with tensor groups against without, on the GPU
# machine's CPU cores (clean of the development machine's other work):
# optimizer_bench's adamw_step (StepBlock, every ISA) and
# adamw_step_groups=1 / =4 (the job's path, StepBlockRuns: one run per block
# as most blocks are, and four runs of two groups), 1 thread up to one per
# core, the passes of each thread count interleaved.
# Needs the bundle: ../shared/tools/device-bundle .device build/bench/optimizer/optimizer_bench
# Usage: bench/optimizer/device_groups.sh OUT  (writes OUT/optimizer_bench.json, OUT/lscpu.txt)
set -euo pipefail
out=${1:?usage: bench/optimizer/device_groups.sh OUT}
mkdir -p "$out"
source .device/env.sh
lscpu >"$out/lscpu.txt"
.device/bin/optimizer_bench --json --params=$((64 << 20)) --reps=5 | tee "$out/optimizer_bench.json"
