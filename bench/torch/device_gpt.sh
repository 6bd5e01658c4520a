#!/usr/bin/env bash
# bench/torch/bench_gpt.py on the GPU machine: GPT-2 759M (micro-batch 8)
# and the Llama 1.1B shape (micro-batch 4), bf16, seq 1024, gradient
# accumulation 1 and 4, every system in one process per model, interleaved
# over 2 rounds: DDP with fused AdamW, FSDP2 + CPUOffloadPolicy(pin_memory=True)
# + AdamW(fused=True), and zerostate.torch (synchronous, speculative,
# delayed; 2 state servers x 6 threads on this host). On a machine with
# more GPUs, once more under torchrun over all of them.
#
# The tree measured is the one this script is in (its python/, bench/torch/,
# examples/gpt/); $ZS_BUNDLE (default .device of that tree) holds env.sh
# and bin/ from the development machine:
#   ../shared/tools/device-bundle .device build/server/zerostate-server build/client/libzerostate_client.so
# then, there:  bash bench/torch/device_gpt.sh OUT_DIR [bench_gpt.py args]
# Environment: BENCH_MODELS (default both), BENCH_LIMIT_S (per process, 270).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=$(cd "${ZS_BUNDLE:-$here/.device}" && pwd)
out=${1:-${OUT:-/tmp/zerostate-gpu}}
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$out"
source "$bundle/env.sh"
export ZEROSTATE_CLIENT_LIB=$bundle/bin/libzerostate_client.so
export PYTHONPATH=$here/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpus.txt"
nproc | tee -a "$out/gpus.txt"
ngpu=$(nvidia-smi -L | wc -l)
limit=${BENCH_LIMIT_S:-270}
args=(--json --server_bin="$bundle/bin/zerostate-server" --servers=2 --server_threads=6 "$@")
for model in ${BENCH_MODELS:-gpt2-759m llama-1.1b}; do
  timeout "$limit" python3 "$here/bench/torch/bench_gpt.py" --model="$model" "${args[@]}" \
    > "$out/$model.json" 2> "$out/$model.log"
  echo "$model rc=$?"; grep -v "^\s*$" "$out/$model.log" | grep -v "run: \|after round" | tail -n 40
  if (( ngpu > 1 )); then
    timeout "$limit" torchrun --standalone --nproc-per-node="$ngpu" \
      "$here/bench/torch/bench_gpt.py" --model="$model" "${args[@]}" \
      > "$out/${model}_x$ngpu.json" 2> "$out/${model}_x$ngpu.log"
    echo "$model x$ngpu rc=$?"; grep -v "^\s*$" "$out/${model}_x$ngpu.log" | grep -v "run: \|after round" | tail -n 40
  fi
done
