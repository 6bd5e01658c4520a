#!/usr/bin/env bash
# Runs every CPU benchmark with --json: one JSON object per figure, each
# with the limit it was measured against in the same run.
set -euo pipefail
build=${1:-build}
for b in optimizer/optimizer_bench nvme/nvme_bench transport/transport_bench step/step_bench \
         load/load_bench; do
  echo "# $b" >&2
  "$build/bench/$b" --json
done
# A step across namespaced hosts at 1, 10 and 25 Gbit/s, and the failover
# under a real partition (bench/cluster; needs root and iproute2: skipped,
# saying why, otherwise).
echo "# cluster/cluster_bench.py" >&2
ZEROSTATE_SERVER="$build/server/zerostate-server" ZEROSTATE_WORKER="$build/worker/zerostate-worker" \
  /usr/bin/python3 "$(dirname "$0")/../bench/cluster/cluster_bench.py" --json --failover || [[ $? == 77 ]]
