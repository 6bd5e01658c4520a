#!/usr/bin/env bash
# Two trees on the GPU machine in one call: bench/torch/device_gpt.sh of
# each side of the bundle (bench/torch/ab_bundle.sh: base and new, each its
# tree and binaries), in the order AB_ORDER (default "base new"; repeat a
# side to alternate, e.g. "base new base new"). Each process interleaves
# its systems and reruns DDP, so compare each side's ratios to its own DDP
# and the delayed step's exposed waits.
# there:  ZS_BUNDLE=.device-ab bash bench/torch/device_ab.sh OUT_DIR [bench_gpt.py args]
# Environment: as device_gpt.sh's (BENCH_MODELS, BENCH_LIMIT_S per process).
set -uo pipefail
bundle=$(cd "${ZS_BUNDLE:?the bundle of bench/torch/ab_bundle.sh}" && pwd)
out=${1:?usage: device_ab.sh OUT_DIR [bench_gpt.py args]}
shift
declare -A runs
for side in ${AB_ORDER:-base new}; do
  runs[$side]=$(( ${runs[$side]:-0} + 1 ))
  # The side's bundle, as device_gpt.sh takes one: its binaries beside the
  # shared libraries.
  b=$(mktemp -d)
  ln -s "$bundle/lib" "$b/lib"
  ln -s "$bundle/$side/bin" "$b/bin"
  cp "$bundle/env.sh" "$b/"
  echo "== $side ${runs[$side]}: $(cat "$bundle/$side/commit.txt")"
  ZS_BUNDLE=$b bash "$bundle/$side/tree/bench/torch/device_gpt.sh" \
    "$out/$side-${runs[$side]}" "$@"
  rm -rf "$b"
done
