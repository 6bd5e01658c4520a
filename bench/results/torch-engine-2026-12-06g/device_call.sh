#!/bin/bash
# Llama 1.1B: fp32 delayed vs DDP/FSDP2; int8 delayed unpinned vs servers pinned away from the trainer
set -u
OUT=$1; root=$PWD
source .device/env.sh
export ZEROSTATE_CLIENT_LIB=$root/.device/bin/libzerostate_client.so PYTHONPATH=$root/python
BENCH_MODELS=llama-1.1b BENCH_LIMIT_S=170 bash bench/torch/device_gpt.sh $OUT/llama-fp32 --accum=1 --systems=ddp,fsdp2,delayed --rounds=2 > $OUT/llama-fp32.txt 2>&1
echo "fp32 done $(date)"
BENCH_MODELS=llama-1.1b BENCH_LIMIT_S=120 bash bench/torch/device_gpt.sh $OUT/llama-int8 --accum=1 --systems=ddp,delayed --rounds=1 --moment_format=MOMENTS_INT8 > $OUT/llama-int8.txt 2>&1
echo "int8 done $(date)"
# pinned: servers on cores 4-15, trainer on 0-3
mkdir -p $OUT/llama-int8-pinned; addrs=()
for i in 0 1; do
  taskset -c 4-15 .device/bin/zerostate-server --listen=127.0.0.1:0 --plaintext --metrics_listen= --threads=6 > $OUT/llama-int8-pinned/s$i.out 2> $OUT/llama-int8-pinned/s$i.log &
done
sleep 2
for i in 0 1; do addrs+=($(grep -o "listening on [0-9.:]*" $OUT/llama-int8-pinned/s$i.out | awk '{print $3}')); done
A=$(IFS=,; echo "${addrs[*]}"); echo "servers $A"
nvidia-smi --query-gpu=name --format=csv > $OUT/llama-int8-pinned/gpus.txt
timeout 120 taskset -c 0-3 python3 bench/torch/bench_gpt.py --model=llama-1.1b --json --server_bin=.device/bin/zerostate-server --server_addresses=$A --accum=1 --systems=ddp,delayed --rounds=1 --moment_format=MOMENTS_INT8 > $OUT/llama-int8-pinned/llama-1.1b.json 2> $OUT/llama-int8-pinned/llama-1.1b.log
echo "pinned rc=$? $(date)"; kill %1 %2 2>/dev/null
python3 bench/torch/table.py $OUT/*/llama-1.1b.json
