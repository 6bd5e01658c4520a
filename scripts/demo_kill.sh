# Sourced by scripts/demo_mlp.sh with KILL=1 (make demo-kill): a server
# SIGKILLed mid-run costs no rollback (docs/reliability.md, "Replicated
# shards"). Uses scripts/demo_lib.sh's $tmp, $pids, free_port, start_server.
# etcd, three servers in it with 2 s leases, the MLP job with one backup of
# each shard (train.replicas: 1), checkpointing every 20 steps (so a
# rollback could happen and would show). The job trains once without
# faults, then again while server 1 is SIGKILLed at step $kill_step; both
# runs dump their final fp32 master weights, which must be the same bits.
etcd_bin=${ETCD:-/usr/bin/etcd}
[[ -x $etcd_bin ]] || { echo "demo: KILL=1 needs etcd ($etcd_bin; Debian: etcd-server)" >&2; exit 1; }
[[ $steps != 0 ]] || steps=60
kill_step=$((steps / 2))

etcd_port=$(free_port)
etcd_peer=$(free_port)
while [[ $etcd_peer == "$etcd_port" ]]; do etcd_peer=$(free_port); done
"$etcd_bin" --name=demo --data-dir="$tmp/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer" \
  --initial-cluster="demo=http://127.0.0.1:$etcd_peer" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "ready to serve client requests" "$tmp/etcd.log" && break
  kill -0 "${pids[-1]}" 2>/dev/null || { echo "demo: etcd did not start:" >&2; cat "$tmp/etcd.log" >&2; exit 1; }
  sleep 0.1
done
echo "demo: etcd at 127.0.0.1:$etcd_port"

server_pids=()
for i in 0 1 2; do
  start_server "$i" --listen="127.0.0.1:$(free_port)" --etcd_endpoints="127.0.0.1:$etcd_port" \
    --cluster="demo-$$" --etcd_lease_ttl_seconds=2
  server_pids+=("${pids[-1]}")
done
servers=$(server_addresses 0 1 2)
echo "demo: state servers at $servers, members of cluster demo-$$ in etcd"

# The demo's MLP job with one backup per shard.
config=$tmp/mlp_replicated.textproto
sed 's/^train {$/train {\n  replicas: 1/' configs/mlp.textproto >"$config"
ZEROSTATE_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ZEROSTATE_JOB_TOKEN

# Trains job $1 ($steps steps, two nodes of two ranks) and waits; rank 0
# dumps the final masters to $tmp/$1.weights. With $2 = kill: server 1 is
# SIGKILLed once rank 0 has printed step $kill_step.
train() {
  local job=$1 mode=${2:-} node wpids=()
  mkdir -p "$tmp/ckpt-$job"
  for node in 0 1; do
    WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=$node "$worker_bin" --config="$config" \
      --servers="$servers" --plaintext --local_threads=2 --job_id="$job" --metrics_port=0 \
      --steps="$steps" --checkpoint_every=20 --checkpoint_dir="$tmp/ckpt-$job" \
      --dump_weights="$tmp/$job.weights" >"$tmp/$job.node$node.log" 2>&1 &
    wpids+=($!)
  done
  if [[ $mode == kill ]]; then
    while ! grep -q "^step $kill_step " "$tmp/$job.node0.log"; do
      kill -0 "${wpids[0]}" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "${server_pids[1]}"
    wait "${server_pids[1]}" 2>/dev/null || true
    echo "demo: step $kill_step done; SIGKILLed server 1 ($(cut -d, -f2 <<<"$servers")) mid-run"
  fi
  local status=0 pid
  for pid in "${wpids[@]}"; do wait "$pid" || status=$?; done
  if [[ $status != 0 ]]; then
    echo "demo: job $job failed (exit $status):" >&2
    tail -n 20 "$tmp/$job.node0.log" "$tmp/$job.node1.log" >&2
    exit "$status"
  fi
}

echo "demo: training the job without faults ($steps steps)"
train "ref-$$"
echo "demo: $(grep '^loss:' "$tmp/ref-$$.node0.log")"
echo "demo: training it again; server 1 is SIGKILLed after step $kill_step"
train "kill-$$" kill
grep '^step ' "$tmp/kill-$$.node0.log" | sed -n "$((kill_step - 1)),$((kill_step + 3))p" | cut -d'|' -f1 |
  sed 's/^/demo:   /'
# The step in flight when the server died is the slowest: its time is the
# failover (etcd's 2 s lease runs out, then the backup claims the shard).
slowest=$(awk '/^step / { t = 0; for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9.]+ms$/) t += $i + 0
                          if (t > m) m = t } END { printf "%.0f", m }' "$tmp/kill-$$.node0.log")
echo "demo: the slowest step took ${slowest} ms: the failover to the backup"
echo "demo: $(grep '^loss:' "$tmp/kill-$$.node0.log")"
if grep -q "restored" "$tmp/kill-$$.node0.log" "$tmp/kill-$$.node1.log"; then
  echo "demo: FAILED: the faulted run rolled back:" >&2
  grep -h "restored" "$tmp/kill-$$.node0.log" "$tmp/kill-$$.node1.log" >&2
  exit 1
fi
echo "demo: training went on: all $steps steps ran once, no rollback (no checkpoint restored)"
if cmp -s "$tmp/ref-$$.weights" "$tmp/kill-$$.weights"; then
  echo "demo: final weights bit-identical to the unfaulted run ($(stat -c %s "$tmp/ref-$$.weights") bytes, sha256 $(sha256sum "$tmp/kill-$$.weights" | cut -c1-16))"
else
  echo "demo: FAILED: the final weights differ from the unfaulted run's" >&2
  exit 1
fi
echo "demo: done; stopping the servers and etcd"
