#!/usr/bin/env bash
# Where zerostate.torch's step goes, on the GPU machine, in about 3
# minutes: bench/torch/bench_gpt.py, one round, int8 moments, 2 state
# servers x 6 threads on this host, DDP rerun in each process for the
# ratios, each zerostate run's breakdown (timeline.py: the exposed waits,
# the engine's host work, the compute stream's stalls on the side streams,
# the copies, what is left unaccounted) and PROFILE_STEPS steps of it
# under torch.profiler:
#   - the Llama 1.1B shape (micro-batch 4): DDP, synchronous and delayed,
#     gradient accumulation 4, then 1 (first what matters most, should
#     the process run out of time);
#   - GPT-2 759M (micro-batch 8), accumulation 4: DDP, synchronous,
#     speculative and delayed.
# Then the tables (bench/torch/table.py), from the JSON, or from the
# per-run lines of the log where a process ran out of time.
#
# The bundle as device_gpt.sh's ($ZS_BUNDLE, default .device of this tree:
# env.sh and bin/ with zerostate-server and libzerostate_client.so):
#   there:  bash bench/torch/device_breakdown.sh OUT_DIR [bench_gpt.py args]
# Here (the CPU, the tiny model at accumulation 2 and 1, fewer systems; no
# bundle):
#   BREAKDOWN_CPU=1 bash bench/torch/device_breakdown.sh /tmp/out
# Environment: PROFILE_STEPS (default 1; 0: no profiler), BREAKDOWN_LIMIT_S
# (per process, default 88: the two stay within 3 minutes).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: device_breakdown.sh OUT_DIR [bench_gpt.py args]}
shift
mkdir -p "$out"
limit=${BREAKDOWN_LIMIT_S:-88}
common=(--json --rounds=1 --moment_format=MOMENTS_INT8 --servers=2
        --profile_steps="${PROFILE_STEPS:-1}")
if [[ -n "${BREAKDOWN_CPU:-}" ]]; then
  py=/usr/bin/python3
  common+=(--device=cpu --server_threads=1 --steps=2)
  runs=("tiny:2,1:ddp,sync,delayed" "tiny:2:ddp,speculative")
else
  bundle=$(cd "${ZS_BUNDLE:-$root/.device}" && pwd)
  source "$bundle/env.sh"
  export ZEROSTATE_CLIENT_LIB=$bundle/bin/libzerostate_client.so
  py=python3
  common+=(--server_bin="$bundle/bin/zerostate-server" --server_threads=6)
  runs=("llama-1.1b:4,1:ddp,sync,delayed" "gpt2-759m:4:ddp,sync,speculative,delayed")
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpus.txt"
  nproc | tee -a "$out/gpus.txt"
fi
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
for run in "${runs[@]}"; do
  IFS=: read -r model accum systems <<< "$run"
  name=$model-accum${accum//,/-}
  start=$SECONDS
  timeout "$limit" "$py" "$root/bench/torch/bench_gpt.py" --model="$model" --accum="$accum" \
    --systems="$systems" "${common[@]}" "$@" > "$out/$name.json" 2> "$out/$name.log"
  echo "$name rc=$? $((SECONDS - start)) s"
  grep "tokens/s\|failed" "$out/$name.log" | tail -n 12
done
"$py" "$root/bench/torch/table.py" "$out"/*.log
