#!/usr/bin/env bash
# The speculative step for several sizes of its pool (zerostate-server
# --speculation_threads), against the synchronous step in the same run, on
# the 100.7M MLP of device_all.sh at bf16 and fp32: one server per pool
# size (--threads=$SERVER_THREADS, default 15), each running the
# speculative job at both wires, the first also the synchronous ones.
# Prints device_all_summary.py's figures of each server, prefixed
# `speculation_threads_<n>.`. Pool sizes: SPEC_THREADS (default "4 8 15").
# Bundle as for device_all.sh; then, there:
#   bash bench/step/device_speculation.sh $OUT
# A check without a GPU: the CPU variables of device_all.sh's header.
set -uo pipefail
step_dir=$(dirname "$0")
root=${1:-${OUT:-/tmp/zerostate-speculation}}
first=1
for n in ${SPEC_THREADS:-4 8 15}; do
  (
    out=$root/threads_$n
    export SERVER_THREADS=${SERVER_THREADS:-15} SERVER_METRICS=127.0.0.1:0
    export SERVER_FLAGS="--speculation_threads=$n"
    source "$step_dir/device_server.sh" >/dev/null
    source "$step_dir/device_mlp.sh"
    for wire in bf16 fp32; do
      [[ $first == 1 ]] && zs_mlp "sync_$wire" "$wire"
      MLP_EXTRA="speculative_step: true" zs_mlp "speculative_$wire" "$wire"
    done
    python3 "$step_dir/device_all_summary.py" --out "$out" --batch "${MLP_BATCH:-64}" \
      --reference "" >"$out/summary.json"
  )
  grep -v '"value": null' "$root/threads_$n/summary.json" |
    sed "s/\"figure\": \"/\"figure\": \"speculation_threads_$n./"
  first=0
done
