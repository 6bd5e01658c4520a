#!/usr/bin/env bash
# A base tree (e.g. main's) against this one on the GPU machine, in one
# call: bench/torch/device_gpt.sh of the base tree with its own binaries,
# then of this tree, alternated AB_ROUNDS times (default 1: base, this).
# Each process interleaves its systems and reruns DDP, so compare each
# side's ratios to its own DDP, and the delayed step's exposed waits.
# $ZS_BUNDLE (default .device of this tree) comes from bench/torch/ab_bundle.sh:
#   bash bench/torch/ab_bundle.sh .device-ab /work/main
# then, there:  bash bench/torch/device_ab.sh OUT_DIR [bench_gpt.py args]
# Environment: as device_gpt.sh's (BENCH_MODELS, BENCH_LIMIT_S per process).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=$(cd "${ZS_BUNDLE:-$root/.device}" && pwd)
out=${1:?usage: device_ab.sh OUT_DIR [bench_gpt.py args]}
shift
# The base's bundle: its binaries beside this bundle's libraries.
base=$(mktemp -d)
ln -s "$bundle/lib" "$base/lib"
ln -s "$bundle/base/bin" "$base/bin"
cp "$bundle/env.sh" "$base/"
cat "$bundle/base/commit.txt" 2>/dev/null
for round in $(seq 1 "${AB_ROUNDS:-1}"); do
  for side in base this; do
    tree=$root b=$bundle
    [[ $side == base ]] && tree=$bundle/base/tree b=$base
    echo "== round $round: $side ($tree)"
    ZS_BUNDLE=$b bash "$tree/bench/torch/device_gpt.sh" "$out/$side-$round" "$@"
  done
done
rm -rf "$base"
