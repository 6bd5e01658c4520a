#!/usr/bin/env bash
# bench/torch/bench_gpt.py on the GPU machine: GPT-2 759M (micro-batch 8)
# and the Llama 1.1B shape (micro-batch 4), bf16, seq 1024, gradient
# accumulation 1 and 4, every system in one process per model, interleaved
# over 2 rounds: DDP with fused AdamW, FSDP2 + CPUOffloadPolicy(pin_memory=True)
# + AdamW(fused=True), and zerostate.torch (synchronous, speculative,
# delayed; 2 state servers x 6 threads on this host).
#
# BUNDLE is a folder holding env.sh and bin/ (device-bundle of
# build/server/zerostate-server and build/client/libzerostate_client.so)
# and src/ (python/, bench/torch/, examples/gpt/ of the tree to measure);
# then, there:  bash BUNDLE/src/bench/torch/device_gpt.sh BUNDLE OUT_DIR [extra args]
set -uo pipefail
bundle=$(cd "$1" && pwd)
out=${2:-${OUT:-/tmp/zerostate-gpu}}
shift 2
mkdir -p "$out"
source "$bundle/env.sh"
export ZEROSTATE_CLIENT_LIB=$bundle/bin/libzerostate_client.so
export PYTHONPATH=$bundle/src/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpus.txt"
nproc | tee -a "$out/gpus.txt"
limit=${BENCH_LIMIT_S:-270}
for model in ${BENCH_MODELS:-gpt2-759m llama-1.1b}; do
  timeout "$limit" python3 "$bundle/src/bench/torch/bench_gpt.py" --model=$model --json \
    --server_bin="$bundle/bin/zerostate-server" --servers=2 --server_threads=6 "$@" \
    > "$out/$model.json" 2> "$out/$model.log"
  echo "$model rc=$?"; grep -v "^\s*$" "$out/$model.log" | grep -v "run: " | tail -n 40
done
