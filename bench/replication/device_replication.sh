#!/bin/bash
# Replicated shards on the GPU machine's CPU cores (issue 19): step time
# with one backup per shard against none, same run, and failover time
# (replication_bench: three zerostate-server processes on loopback, two
# nodes, bf16 wire, AdamW), at two model sizes.
# Needs the bundle:
#   ../shared/tools/device-bundle .device build/bench/replication/replication_bench build/server/zerostate-server
# Usage: bench/replication/device_replication.sh OUT
#   writes OUT/replication_bench_{16m,64m}.json (one JSON object per figure;
#   replication.step_ratio against its 1.15 limit), the servers' logs in
#   OUT/replication_bench_*.err, OUT/lscpu.txt, OUT/commit.txt.
# ZS_BIN=a folder with both binaries runs it without the bundle, SIZES="1"
# other model sizes (a check on the development machine).
set -euo pipefail
out=${1:?usage: bench/replication/device_replication.sh OUT}
mkdir -p "$out"
if [[ -z ${ZS_BIN:-} ]]; then
  source .device/env.sh
  bin=.device/bin
else
  bin=$ZS_BIN
fi
lscpu >"$out/lscpu.txt"
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null || true
for size in ${SIZES:-16 64}; do  # Mi parameters
  "$bin/replication_bench" --json --params=$((size << 20)) --steps=8 \
      --server="$bin/zerostate-server" \
      >"$out/replication_bench_${size}m.json" 2>"$out/replication_bench_${size}m.err"
  cat "$out/replication_bench_${size}m.json"
done
