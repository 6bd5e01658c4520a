#!/usr/bin/env bash
# The issue-17 GPT (759M: GPT2LMHeadModel from config, 24 layers, d=1536,
# 12 heads, vocab 50304, seq 1024, micro-batch 8, bf16) on the GPU machine:
# DDP with fused AdamW, FSDP2 + CPUOffloadPolicy(pin_memory=True) +
# AdamW(fused=True), and zerostate with 2 state servers on this host, in one
# run (bench/torch/bench_gpt.py --json); on a machine with more GPUs, once
# more under torchrun over all of them. Bundle on the development machine:
#   ../shared/tools/device-bundle .device build/server/zerostate-server build/client/libzerostate_client.so
# then, there:  bash bench/torch/device_gpt.sh OUT_DIR
set -uo pipefail
out=${1:-${OUT:-/tmp/zerostate-gpu}}
mkdir -p "$out"
source .device/env.sh
export ZEROSTATE_CLIENT_LIB=$PWD/.device/bin/libzerostate_client.so
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpus.txt"
ngpu=$(nvidia-smi -L | wc -l)
git log -1 --format=%H 2>/dev/null > "$out/commit.txt"
srv=(--server_bin=.device/bin/zerostate-server --servers=2 --server_threads=6)
big=(--hf --device=cuda "${srv[@]}" --steps=10 --warmup=3 --json)
# The small check first (seconds), so a broken path shows before the big run.
timeout 120 python3 bench/torch/bench_gpt.py --device=cuda --tiny "${srv[@]}" --json \
  > "$out/tiny.json" 2> "$out/tiny.log"; echo "tiny rc=$?"; cat "$out/tiny.json"
timeout 300 python3 bench/torch/bench_gpt.py "${big[@]}" > "$out/gpt759m.json" 2> "$out/gpt759m.log"
echo "gpt759m rc=$?"; tail -n 5 "$out/gpt759m.log"; cat "$out/gpt759m.json"
if (( ngpu > 1 )); then
  timeout 300 torchrun --standalone --nproc-per-node="$ngpu" bench/torch/bench_gpt.py "${big[@]}" \
    > "$out/gpt759m_x$ngpu.json" 2> "$out/gpt759m_x$ngpu.log"
  echo "gpt759m x$ngpu rc=$?"; tail -n 5 "$out/gpt759m_x$ngpu.log"; cat "$out/gpt759m_x$ngpu.json"
fi
