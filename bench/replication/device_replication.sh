#!/bin/bash
# Replicated shards on the GPU machine's CPU cores: step time
# with one backup per shard against none, same run, and failover time
# (replication_bench: three zerostate-server processes on loopback, two
# nodes, bf16 wire, AdamW), at two model sizes, each with a step's sums on
# one connection per backup and on four (--replica_lanes).
# Needs the bundle:
#   ../shared/tools/device-bundle .device build/bench/replication/replication_bench build/server/zerostate-server
# Usage: bench/replication/device_replication.sh OUT
#   writes OUT/replication_bench_{16m,64m}_lanes{1,4}.json (one JSON object
#   per figure; replication.step_ratio against its 1.15 limit, and
#   replication.k{0,1}_<phase>_ms: where the servers' part of the steps
#   went; replication.floor.k{0,1}.<stage>, floor_bytes_ratio,
#   step_ratio_vs_floor and floor_k{0,1}_step_ms: the memory-traffic floor
#   of both jobs on one host, bench/replication/replication_floor.h), the servers' logs in OUT/replication_bench_*.err, OUT/lscpu.txt,
#   OUT/commit.txt.
# ZS_BIN=a folder with both binaries runs it without the bundle; SIZES="1"
# and LANES="1 2" other sizes and lane counts (a check on the development
# machine). About 3 minutes on the H200 host.
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
  for lanes in ${LANES:-1 4}; do  # connections per backup for a step's sums
    name=replication_bench_${size}m_lanes${lanes}
    "$bin/replication_bench" --json --params=$((size << 20)) --steps=8 --replica_lanes="$lanes" \
        --server="$bin/zerostate-server" >"$out/$name.json" 2>"$out/$name.err"
    echo "$name"
    cat "$out/$name.json"
  done
done
