#!/usr/bin/env bash
# A node rollback on GPUs, end to end: one node of two CUDA ranks (NCCL in
# the node) against two zerostate-servers, checkpointing every 5 steps.
# Run A trains 40 steps without a fault; run B is the same job, but server 1
# is killed (SIGKILL) after step 20 and restarted on its port: rank 0 finds
# the lost shard, every rank rolls back to the last checkpoint (the ranks
# vote through NCCL, Backend::NodeAnyFailed) and replays. The final fp32
# master weights of B must equal A's bit for bit.
# Bundle on the development machine:
#   ../shared/tools/device-bundle .device build-cuda-auto/worker/zerostate-worker build/server/zerostate-server
# then, on nvidia-h200-x2:  bash bench/step/gpu_rollback.sh OUT_DIR
# (BACKEND=cpu runs the same with the CPU backend, to try the script here).
set -uo pipefail
out=${1:-${OUT:-/tmp/zerostate-rollback}}
mkdir -p "$out"
source .device/env.sh
bin=.device/bin
ports=($(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])'))
pids=()
start_server() {  # start_server I: server I on its port, log appended
  "$bin/zerostate-server" --listen=127.0.0.1:${ports[$1]} --plaintext --metrics_listen= --threads=8 \
    >>"$out/server$1.log" 2>&1 &
  pids[$1]=$!
  for _ in $(seq 100); do grep -q "listening on" "$out/server$1.log" && break; sleep 0.1; done
}
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null' EXIT
start_server 0
start_server 1
servers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}
ZEROSTATE_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ZEROSTATE_JOB_TOKEN

run() {  # run NAME: one node of two CUDA ranks, in the background
  local name=$1
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 \
      "$bin/zerostate-worker" --config=configs/mlp.textproto --servers="$servers" --plaintext \
      --metrics_port=0 --backend="${BACKEND:-cuda}" --steps=40 --job_id="$name" --run_id="$name-$$" \
      --checkpoint_every=5 --checkpoint_dir="$out/ckpt" --peer_timeout_seconds=60 \
      --dump_weights="$out/$name.bin" >"$out/${name}_rank$r.log" 2>&1 &
  done
}

run A
while pgrep -f "zerostate-worker.*--job_id=A" >/dev/null; do sleep 0.2; done
run B
for _ in $(seq 600); do grep -q "^step 20 loss" "$out/B_rank0.log" 2>/dev/null && break; sleep 0.1; done
kill -9 "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
echo "killed server 1 after step 20" | tee -a "$out/run.log"
start_server 1
while pgrep -f "zerostate-worker.*--job_id=B" >/dev/null; do sleep 0.2; done
tail -n 3 "$out"/A_rank0.log "$out"/B_rank0.log | tee -a "$out/run.log"
grep -h "restored" "$out"/B_rank*.log | head -5 | tee -a "$out/run.log"
if cmp -s "$out/A.bin" "$out/B.bin" && [[ -s $out/A.bin ]]; then
  echo "final weights bit-identical ($(stat -c %s "$out/A.bin") bytes)" | tee -a "$out/run.log"
else
  echo "final weights DIFFER or missing" | tee -a "$out/run.log"
  exit 1
fi
