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
