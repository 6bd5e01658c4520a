#!/usr/bin/env bash
# The speculative step on several servers that differ in how they run it,
# against the synchronous step in the same run, on the 100.7M MLP of
# device_all.sh at bf16 and fp32: one server per entry of SPEC_SERVERS
# (--threads=$SERVER_THREADS, default 15), each running the speculative
# job at both wires, the first also the synchronous ones. An entry is
# NAME=FLAGS, the server's extra flags with commas for spaces; default
# "threads_4=--speculation_threads=4 threads_8=--speculation_threads=8
# threads_15=--speculation_threads=15" (the speculation pool's size).
# Name an entry twice (NAME_a, NAME_b, ...) for rounds of an A/B: they run
# in the order given. An entry whose NAME starts with `prev` runs
# bin/zerostate-server-prev (a server of an earlier commit, bundled under
# that name) instead: an A/B of a server change. SPEC_SYNC=all runs the
# synchronous step on every server, not only the first. Prints
# device_all_summary.py's figures of each server, prefixed `NAME.`. Bundle as for device_all.sh; then, there:
#   bash bench/step/device_speculation.sh $OUT
#   SPEC_SYNC=all SPEC_SERVERS="prev_1= new_1= prev_2= new_2=" \
#     bash bench/step/device_speculation.sh $OUT
# SPEC_WIRES: the wires to run (default "bf16 fp32").
# A check without a GPU: the CPU variables of device_all.sh's header.
set -uo pipefail
step_dir=$(dirname "$0")
root=${1:-${OUT:-/tmp/zerostate-speculation}}
first=1
servers=${SPEC_SERVERS:-threads_4=--speculation_threads=4 threads_8=--speculation_threads=8 threads_15=--speculation_threads=15}
for entry in $servers; do
  name=${entry%%=*} flags=${entry#*=}
  (
    out=$root/$name
    export SERVER_THREADS=${SERVER_THREADS:-15} SERVER_METRICS=127.0.0.1:0
    export SERVER_FLAGS=${flags//,/ }
    [[ $name == prev* ]] && export SERVER=${ZS_BIN:-.device/bin}/zerostate-server-prev
    source "$step_dir/device_server.sh" >/dev/null
    source "$step_dir/device_mlp.sh"
    for wire in ${SPEC_WIRES:-bf16 fp32}; do
      [[ $first == 1 || ${SPEC_SYNC:-first} == all ]] && zs_mlp "sync_$wire" "$wire"
      MLP_EXTRA="speculative_step: true" zs_mlp "speculative_$wire" "$wire"
    done
    python3 "$step_dir/device_all_summary.py" --out "$out" --batch "${MLP_BATCH:-64}" \
      --reference "" >"$out/summary.json"
  )
  grep -v '"value": null' "$root/$name/summary.json" | sed "s/\"figure\": \"/\"figure\": \"$name./"
  first=0
done
