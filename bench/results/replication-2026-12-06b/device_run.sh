#!/bin/bash
# replication_bench on the GPU host's CPU cores: this branch's build (bin/),
# main's build at 6375e2e (base/) in the same call, then this branch with 8 lanes.
set -u
out=$1
dev=$(cd "$(dirname "$0")" && pwd)
source "$dev/env.sh"
{ lscpu; echo "branch commit: $(cat "$dev/commit.txt")"; echo "base: main 6375e2e"; nproc; free -g; } > "$out/machine.txt" 2>&1
grep -E "^Model name|^CPU\(s\)" "$out/machine.txt"
run() {  # name bindir extra-args...
  local name=$1 bin=$2; shift 2
  local t0=$(date +%s)
  timeout 95 "$bin/replication_bench" --json --params=${P:-16777216} --steps=8 --server="$bin/zerostate-server" "$@" \
    > "$out/$name.json" 2> >(gzip > "$out/$name.err.gz")
  echo "$name rc=$? $(( $(date +%s) - t0 )) s"
  grep -E 'path\.(step|k._ratio|k._opt|k._backups_ms)|inside\.(step|k._ratio_vs)|failover_s' "$out/$name.json"
}
run h100_new_16m "$dev/bin"
run h100_base_16m "$dev/base"
run h100_new_16m_lanes8 "$dev/bin" --replica_lanes=8
