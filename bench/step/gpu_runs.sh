#!/usr/bin/env bash
# The worker's runs on the GPU machine (see /work/shared/GPU.md), from a
# device bundle made on the development machine:
#   ../shared/tools/device-bundle .device build-cuda/worker/zerostate-worker build/server/zerostate-server
# then, there:  bench/step/gpu_runs.sh OUT_DIR
# 1. CUDA backend against the CPU backend, one GPU, same config and steps:
#    final fp32 master weights compared with a stated tolerance.
# 2. Two GPUs as one node of two (NCCL inside the node) and as two nodes of
#    one each, both against the CPU backend with world size 2.
# 3. A >= 100M-parameter MLP on one GPU: the worker's per-step time split,
#    and the pure-GPU step (PyTorch, no offload) as the reference.
set -uo pipefail
out=${1:-${OUT:-/tmp/zerostate-gpu}}
mkdir -p "$out"
cfg=configs/mlp.textproto
steps=${STEPS:-60}
source "$(dirname "$0")/device_server.sh"  # bin, srv, the job token

# worker NAME ENV... -- FLAGS...: one process of a run, output in NAME.log.
worker() {
  local name=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$bin/zerostate-worker" --config=$cfg --servers="$srv" --plaintext --metrics_port=0 \
    --steps="$steps" "$@" >"$out/$name.log" 2>&1
}

compare() {  # compare A B: final master weights of two runs
  python3 - "$out/$1.bin" "$out/$2.bin" <<'PY' | tee -a "$out/compare.txt"
import sys, numpy as np
a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:3])
d = np.abs(a - b)
print(f"{sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: elems {a.size} "
      f"max|diff| {d.max():.3e} mean|diff| {d.mean():.3e} max|w| {np.abs(b).max():.3e} "
      f"rel {d.max() / np.abs(b).max():.3e}")
PY
}

# 1. one GPU against the CPU backend.
worker cpu1 WORLD_SIZE=1 -- --job_id=cpu1 --backend=cpu --dump_weights="$out/cpu1.bin"
worker cuda1 WORLD_SIZE=1 -- --job_id=cuda1 --backend=cuda --dump_weights="$out/cuda1.bin"
compare cuda1 cpu1

# 2. two GPUs: one node of two, two nodes of one, against CPU with world size 2.
if [[ $(nvidia-smi -L | wc -l) -ge 2 ]]; then
  pids=()
  worker cpu2 WORLD_SIZE=2 -- --job_id=cpu2 --backend=cpu --local_threads=2 --dump_weights="$out/cpu2.bin"
  for r in 0 1; do
    worker node1x2_rank$r RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 -- \
      --job_id=n1x2 --backend=cuda --dump_weights="$out/n1x2.bin" &
    pids+=($!)
  done
  wait "${pids[@]}"; pids=()
  for r in 0 1; do
    worker node2x1_rank$r RANK=$r LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 NODE_RANK=$r \
      CUDA_VISIBLE_DEVICES=$r -- --job_id=n2x1 --backend=cuda --dump_weights="$out/n2x1.bin" &
    pids+=($!)
  done
  wait "${pids[@]}"
  compare n1x2 cpu2
  compare n2x1 cpu2
fi

# 3. a 101M-parameter MLP on one GPU.
cat > "$out/big.textproto" <<'CFG'
train { job_id: "big" model { input_dim: 2048 hidden: [8192, 8192] output_dim: 2048 }
        micro_batch_size: 64 steps: 8 block_elems: 262144 }
CFG
WORLD_SIZE=1 "$bin/zerostate-worker" --config="$out/big.textproto" --servers="$srv" --plaintext --metrics_port=0 \
  --backend=cuda >"$out/big_cuda.log" 2>&1
python3 bench/step/pure_gpu_step.py --batch 64 | tee "$out/pure_gpu.json"
tail -n 4 "$out"/*.log
cat "$out/compare.txt"
