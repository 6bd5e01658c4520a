#!/usr/bin/env bash
# The C++ worker's demo (make demo-mlp): on one machine, two zerostate-server
# processes on loopback and a job of two simulated nodes with two workers
# each (CPU backend, ranks as threads of one process per node) that trains
# the built-in MLP (configs/mlp.textproto) until the loss has clearly
# fallen. Prints the first and last loss and where the metrics are; stops
# everything on exit, also on Ctrl-C or an error.
#   scripts/demo_mlp.sh [BUILD_DIR] [STEPS]
# With KILL=1 (make demo-kill): replicated shards. etcd and
# three servers in it; the job keeps one backup of each shard
# (train.replicas: 1) and checkpoints every 20 steps. It trains once
# without faults, then again while one server is SIGKILLed mid-run; it
# prints that training went on with no rollback (no checkpoint restored)
# and that the final weights are bit-identical to the unfaulted run's.
set -euo pipefail
build=${1:-build}
steps=${2:-0}
kill_demo=${KILL:-0}
cd "$(dirname "$0")/.."
server_bin=$build/server/zerostate-server
worker_bin=$build/worker/zerostate-worker
for b in "$server_bin" "$worker_bin"; do
  [[ -x $b ]] || { echo "demo: $b not built (run: make demo-mlp)" >&2; exit 1; }
done

source scripts/demo_lib.sh

if [[ $kill_demo != 0 ]]; then
  source scripts/demo_kill.sh
  exit 0
fi

start_server 0
start_server 1
servers=$(server_addresses 0 1)
echo "demo: state servers at $servers"
print_metrics 0 1

step_flag=()
[[ $steps != 0 ]] && step_flag=(--steps="$steps")
job="demo-$$"
# The job's token, shared by every worker through the environment only.
ZEROSTATE_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ZEROSTATE_JOB_TOKEN
for node in 0 1; do
  port=$(free_port)
  echo "demo: node $node workers' metrics at http://127.0.0.1:$port/metrics"
  WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=$node "$worker_bin" --config=configs/mlp.textproto \
    --servers="$servers" --plaintext --local_threads=2 --job_id="$job" --metrics_port="$port" \
    "${step_flag[@]}" \
    >"$tmp/node$node.log" 2>&1 &
  pids+=($!)
done
worker_pids=("${pids[@]:2}")

# Node 0 holds global rank 0, which prints a line per step.
tail -n +1 -f "$tmp/node0.log" --pid="${worker_pids[0]}" | grep --line-buffered -v "^zerostate-worker rank" &
status=0
for pid in "${worker_pids[@]}"; do wait "$pid" || status=$?; done
sleep 0.2
if [[ $status != 0 ]]; then
  echo "demo: a worker failed (exit $status):" >&2; cat "$tmp/node1.log" >&2; exit "$status"
fi
first=$(sed -n 's/^loss: first \([^ ]*\) last \([^ ]*\).*/\1/p' "$tmp/node0.log")
last=$(sed -n 's/^loss: first \([^ ]*\) last \([^ ]*\).*/\2/p' "$tmp/node0.log")
echo "demo: loss fell from $first to $last (rank 0's micro-batches)"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.5 * f) }' \
  || { echo "demo: the loss did not fall clearly" >&2; exit 1; }
echo "demo: done; stopping the servers"
