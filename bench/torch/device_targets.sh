#!/usr/bin/env bash
# Every open GPU-host target in one device call (about 7 minutes): GPT-2
# 759M and Llama 1.1B at accumulation 1 (fp32 and int8 moments) with DDP in
# each process, replication path k=0/1/2 on 16 cores, engine_gpu_test; then, while
# CALL_BUDGET_S lasts, FSDP2's offload and accumulation 4 (or the TLS split). Results tarred after
# every part (a cut-off call still brings back what ran): OUT/part1.tar.gz
# (the torch runs' JSON and logs, table.txt), OUT/part2.tar.gz (replication,
# TLS). CALL_BUDGET_S (default 420): after it, the optional parts are skipped.
# The bundle in .device (of the tree's root), made on the development machine:
#   ../shared/tools/device-bundle .device build/server/zerostate-server \
#     build/client/libzerostate_client.so build/bench/optimizer/optimizer_bench \
#     build/bench/transport/transport_bench build/bench/transport/stream_bench \
#     build/bench/replication/replication_bench
#   strip -s .device/bin/*; git log --oneline -1 > .device/commit.txt
# there: bash bench/torch/device_targets.sh $OUT
set -u
out=${1:?OUT}
cd "$(dirname "$0")/../.."
source .device/env.sh
export ZEROSTATE_CLIENT_LIB=$PWD/.device/bin/libzerostate_client.so
export PYTHONPATH=$PWD/python
T0=$SECONDS
log() { echo "[$((SECONDS - T0)) s] $*"; }
p1=$out/part1; p2=$out/part2; mkdir -p "$p1" "$p2"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$p1/gpus.txt"; nproc | tee -a "$p1/gpus.txt"
cp .device/commit.txt "$p1/"
pack() { tar -czf "$out/part1.tar.gz" -C "$out" part1; tar -czf "$out/part2.tar.gz" -C "$out" part2; }
common=(--json --rounds=1 --servers=2 --server_threads=6 --server_bin=$PWD/.device/bin/zerostate-server --accum=1)
run() {  # name limit args...
  local name=$1 lim=$2; shift 2
  timeout "$lim" python3 bench/torch/bench_gpt.py "${common[@]}" "$@" > "$p1/$name.json" 2> "$p1/$name.log"
  log "$name rc=$?"; grep "tokens/s\|failed\|Error" "$p1/$name.log" | tail -n 8
  pack
}
budget=${CALL_BUDGET_S:-420}
# ZS_TARGETS_OPTIONAL_ONLY=1: only the optional parts below, for each format
# in ZS_TARGETS_MOMENTS (default MOMENTS_FP32; names end in -fp32, -int8, ...).
if [ -z "${ZS_TARGETS_OPTIONAL_ONLY:-}" ]; then
run gpt2-fp32 120 --model=gpt2-759m --systems=ddp,sync,speculative,delayed --moment_format=MOMENTS_FP32
run llama-int8 75 --model=llama-1.1b --systems=ddp,delayed --moment_format=MOMENTS_INT8
log replication
SETTINGS=path timeout 80 bash bench/replication/device_replication.sh "$p2/repl" > "$p2/repl.log" 2>&1
log "replication rc=$?"; tail -8 "$p2/repl.log"; pack
run llama-fp32 90 --model=llama-1.1b --systems=ddp,delayed --moment_format=MOMENTS_FP32
if (( budget - (SECONDS - T0) > 90 )); then
  run gpt2-int8 75 --model=gpt2-759m --systems=ddp,sync,delayed --moment_format=MOMENTS_INT8
fi
log engine_gpu_test
( cd tests/python && ZEROSTATE_SERVER=$OLDPWD/.device/bin/zerostate-server timeout 60 python3 engine_gpu_test.py ) > "$p1/engine_gpu_test.log" 2>&1
log "engine_gpu_test rc=$?"; tail -3 "$p1/engine_gpu_test.log"
python3 bench/torch/table.py "$p1"/*.log > "$p1/table.txt" 2>&1; tail -30 "$p1/table.txt"
pack
fi
# The targets not rerun since 2026-12-06f: FSDP2's offload beside the
# delayed update (GPT-2 >= 1.6x, Llama >= 1.5x) and accumulation 4
# (GPT-2: sync >= 1.0 of DDP, speculative >= 1.15, delayed >= 1.25 and >= 1.8x
# FSDP2's offload; Llama: delayed >= 1.0, sync >= 0.8); ZS_TARGETS_TLS=1
# runs the TLS split instead.
if [ -z "${ZS_TARGETS_TLS:-}" ]; then
  for part in "gpt2-fsdp2 100 --model=gpt2-759m --systems=ddp,fsdp2,delayed" \
      "gpt2-accum4 150 --model=gpt2-759m --systems=ddp,fsdp2,sync,speculative,delayed --accum=4" \
      "llama-fsdp2 110 --model=llama-1.1b --systems=ddp,fsdp2,delayed" \
      "llama-accum4 110 --model=llama-1.1b --systems=ddp,sync,delayed --accum=4"; do
    for moments in ${ZS_TARGETS_MOMENTS:-MOMENTS_FP32}; do
      set -- $part
      (( budget - (SECONDS - T0) > $2 )) || { log "$1 $moments skipped (budget)"; continue; }
      name="$1-$(echo "${moments#MOMENTS_}" | tr A-Z a-z)"; shift
      run "$name" "$@" --moment_format="$moments"
    done
  done
  python3 bench/torch/table.py "$p1"/*.log > "$p1/table.txt" 2>&1; tail -30 "$p1/table.txt"
else
  left=$((budget - (SECONDS - T0)))
  log "tls split, $left s left"
  if ((left > 90)); then
    timeout "$left" bash bench/transport/device_tls_split.sh "$p2/tls" > "$p2/tls.log" 2>&1
    log "tls rc=$?"; tail -25 "$p2/tls.log"
  fi
fi
pack
log done
