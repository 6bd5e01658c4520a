#!/usr/bin/env bash
# The offloaded step's figures on the GPU machine (nvidia-h200: one H200,
# 16 cores), in one run, against their peers run in the same run:
#  1. step_bench --json (CPU backend, its own server on loopback):
#     server_step (the server's step inside the job against the AdamW
#     memory limit at the same thread count) and overlap, on these cores;
#  2. the 100.7M-parameter MLP of device_big.sh (2048 -> 8192 -> 8192 ->
#     2048, micro-batch 64, AdamW) end to end through zerostate on the GPU,
#     one server on loopback (--threads=$SERVER_THREADS, default 15, plus
#     the calling thread: 16), TCP data plane, and the server's step
#     phases from its metrics;
#  3. the same model and batch under PyTorch FSDP2 + CPUOffloadPolicy(
#     pin_memory=True) + AdamW(fused=True) (bench/step/fsdp2_step.py);
#  4. the same as 2 with speculative_step (the server steps each block as
#     its gradients arrive, with the Step's parameters sent ahead; the Step
#     only commits): figures zerostate_<wire>_speculative_*;
# 2, 3 and 4 at fp32 on the wire, then at bf16 (zerostate: bf16 gradients and
# weights on the wire; FSDP2: MixedPrecisionPolicy(param_dtype=bf16)).
# step_bench's speculative_* figures are 1. with speculative_step.
# Prints --json: ms per step of each and fsdp2 ms / zerostate ms (> 1:
# zerostate is faster). Bundle on the development machine:
#   ../shared/tools/device-bundle .device build-cuda-auto/worker/zerostate-worker \
#     build/server/zerostate-server build/bench/step/step_bench
# then, there:  bash bench/step/device_step.sh $OUT
set -uo pipefail
step_dir=$(dirname "$0")  # not "here": .device/env.sh sets that
export SERVER_THREADS=${SERVER_THREADS:-15} SERVER_METRICS=127.0.0.1:0
source "$step_dir/device_server.sh"  # out (from $1), bin, srv, the job token
"$bin/step_bench" --json --server_binary="$bin/zerostate-server" \
  --server_threads="$SERVER_THREADS" 2>"$out/step_bench.err" | tee "$out/step_bench.json"
source "$step_dir/device_mlp.sh"  # zs_mlp, fsdp2_mlp
for wire in fp32 bf16; do
  zs_mlp "big_$wire" "$wire"
  MLP_EXTRA="speculative_step: true" zs_mlp "big_${wire}_speculative" "$wire"
  fsdp2_mlp "$wire"
  python3 "$step_dir/device_step_summary.py" --wire "$wire" --batch 64 --worker_log "$out/big_$wire.log" \
    --metrics "$out/metrics_big_$wire.txt" --job "big_$wire" --fsdp2 "$out/fsdp2_$wire.json" |
    tee "$out/summary_$wire.json"
  python3 "$step_dir/device_step_summary.py" --wire "$wire" --batch 64 --mode speculative \
    --worker_log "$out/big_${wire}_speculative.log" --metrics "$out/metrics_big_${wire}_speculative.txt" \
    --job "big_${wire}_speculative" --fsdp2 "$out/fsdp2_$wire.json" |
    tee "$out/summary_${wire}_speculative.json"
done
