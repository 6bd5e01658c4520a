#!/usr/bin/env bash
# The main job (README's `make demo`): on one machine, two zerostate-server
# processes on loopback and a job of two simulated nodes with two workers
# each (CPU backend, ranks as threads of one process per node) that trains
# the built-in MLP (configs/mlp.textproto) until the loss has clearly
# fallen. Prints the first and last loss and where the metrics are; stops
# everything on exit, also on Ctrl-C or an error.
#   scripts/demo.sh [BUILD_DIR] [STEPS]
# With KILL=1 (make demo KILL=1): replicated shards (issue 19). etcd and
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
  [[ -x $b ]] || { echo "demo: $b not built (run: make build)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A TCP port nothing listens on at loopback (probed from a random start).
free_port() {
  local port=$((20000 + RANDOM % 30000))
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
  echo "$port"
}

# Starts a server; waits for its "listening on HOST:PORT metrics on ADDR" line.
# Plaintext: everything stays on loopback (docs/operations.md, Security).
# Further arguments: the server's extra flags (KILL=1: --listen on a fixed
# port, which a server advertises in etcd).
start_server() {
  local i=$1 log=$tmp/server$1.log
  shift
  "$server_bin" --listen=127.0.0.1:0 --plaintext --metrics_listen=127.0.0.1:0 --threads=1 \
    --ram_budget_bytes=$((256 << 20)) "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    if grep -q "listening on" "$log"; then return 0; fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo: server $i did not start:" >&2; cat "$log" >&2; exit 1
}

if [[ $kill_demo != 0 ]]; then
  source scripts/demo_kill.sh
  exit 0
fi

start_server 0
start_server 1
servers=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$tmp/server0.log" "$tmp/server1.log" | paste -sd, -)
echo "demo: state servers at $servers"
for i in 0 1; do
  echo "demo: server $i metrics at http://$(sed -n 's/.*metrics on \([^ ]*\).*/\1/p' "$tmp/server$i.log")/metrics"
done

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
