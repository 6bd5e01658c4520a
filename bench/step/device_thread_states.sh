#!/usr/bin/env bash
# Whether the server's pass pool runs or waits while it steps: the
# synchronous job of device_all.sh (one server, --threads=$SERVER_THREADS,
# default 15; MLP_STEPS steps, default 40) with thread_states.py sampling
# the server's threads meanwhile, into $out/states_WIRE.json. Bundle as for
# device_all.sh; then, there:
#   bash bench/step/device_thread_states.sh $OUT [bf16|fp32]
# A check without a GPU: the CPU variables of device_all.sh's header.
set -uo pipefail
step_dir=$(dirname "$0")
wire=${2:-bf16}
export SERVER_THREADS=${SERVER_THREADS:-15} SERVER_METRICS=127.0.0.1:0
source "$step_dir/device_server.sh" >/dev/null
source "$step_dir/device_mlp.sh"
python3 "$step_dir/thread_states.py" --pid "$server_pid" >"$out/states_$wire.json" &
sampler=$!
MLP_STEPS=${MLP_STEPS:-40} zs_mlp "sync_$wire" "$wire"
kill -TERM $sampler
wait $sampler
grep -E '"(samples|pool_samples_busy|pool_running)' "$out/states_$wire.json"
tail -n 3 "$out/sync_$wire.log"
