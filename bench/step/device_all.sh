#!/usr/bin/env bash
# Every system on the same model and host, in one run:
# the 100.7M-parameter MLP of device_step.sh (2048 -> 8192 -> 8192 -> 2048,
# micro-batch 64, AdamW) at fp32 and at bf16, through
#   - zerostate, one server on loopback (--threads=$SERVER_THREADS, default
#     15, plus the calling thread: 16), in each mode: synchronous,
#     speculative (train.speculative_step), delayed (train.delayed_update
#     after 2 synchronous steps); and synchronous with one bucket per
#     layer (train.bucket_elems past the largest layer), against the
#     default 16 MiB buckets, and that with every weight landed at the
#     step's end (train.whole_landing), against landing layer by layer;
#     and synchronous with 4 streams per server (the client's
#     streams_per_server, --same_host_streams_per_server=0), against the
#     same-host default of 8; and synchronous with the staging not
#     shared with the server (--shared_staging=false: the client copies
#     into and out of the same-host plane's segments), against shared;
#     bf16: bf16 gradients and weights on the wire;
#   - pure GPU, fused AdamW on the GPU (pure_gpu_step.py);
#   - FSDP2 + CPUOffloadPolicy(pin_memory=True) + AdamW(fused=True) on the
#     CPU (fsdp2_step.py); bf16: MixedPrecisionPolicy(param_dtype=bfloat16);
#   - optimizer_bench --json up to the server's thread count: the host's
#     memory bandwidth, for the floor of our path (bytes of memory traffic
#     per parameter of every stage x parameters / bandwidth).
# Then device_all_summary.py prints --json: every mode's ms per step, its
# ratio to each peer at the same precision (peer ms / ours: above 1 we are
# faster) and to the floor. Bundle on the development machine:
#   ../shared/tools/device-bundle .device build-cuda-auto/worker/zerostate-worker \
#     build/server/zerostate-server build/bench/optimizer/optimizer_bench \
#     build/bench/step/path_floor_bench
# then, there:  bash bench/step/device_all.sh $OUT
# A check without a GPU (CPU backend, a small MLP; the GPU peers fail and
# are reported missing):
#   ZS_BIN=DIR BACKEND=cpu MLP_HIDDEN="512, 512" MLP_INPUT=256 MLP_OUTPUT=256 \
#     FSDP2_FLAGS="--device cpu" OPTIMIZER_FLAGS=--params=8388608 SERVER_THREADS=1 \
#     bash bench/step/device_all.sh /tmp/all
set -uo pipefail
step_dir=$(dirname "$0")  # not "here": .device/env.sh sets that
export SERVER_THREADS=${SERVER_THREADS:-15} SERVER_METRICS=127.0.0.1:0
source "$step_dir/device_server.sh"  # out (from $1), bin, srv, the job token
source "$step_dir/device_mlp.sh"     # zs_mlp, fsdp2_mlp, mlp_args
git rev-parse HEAD >"$out/commit.txt" 2>/dev/null || true
# The CUDA backend's tests on this GPU when bundled (build/tests/worker/cuda/
# worker_cuda_test): among them the overlapped schedule (layer landing,
# reduce-scatters in flight) against the whole one, bit for bit.
if [[ -x $bin/worker_cuda_test ]]; then
  "$bin/worker_cuda_test" >"$out/worker_cuda_test.log" 2>&1
  echo "worker_cuda_test: exit $? ($(grep -c '^\[       OK' "$out/worker_cuda_test.log") passed," \
    "$(grep -c '^\[  FAILED  \] [A-Z]' "$out/worker_cuda_test.log") failed)"
fi

for wire in fp32 bf16; do
  zs_mlp "sync_$wire" "$wire"
  zs_mlp "delayed_$wire" "$wire" --delayed_update_warmup=2
  MLP_EXTRA="speculative_step: true" zs_mlp "speculative_$wire" "$wire"
  # Synchronous with one bucket per layer (the cut before bucket_elems):
  # what cutting a layer's gradient and weights into 16 MiB buckets gives;
  # and with that and every weight landed at the step's end (no layer by
  # layer landing): what landing in the forward gives.
  MLP_EXTRA="bucket_elems: 4294967296" zs_mlp "sync_layer_buckets_$wire" "$wire"
  MLP_EXTRA="bucket_elems: 4294967296 whole_landing: true" zs_mlp "sync_whole_landing_$wire" "$wire"
  # Synchronous with 4 streams per server for each push and gather (the
  # client's default on other hosts; on this one it raises them to 8,
  # client/data_streams.h): whether more of the host's cores on the copies
  # of the same-host plane still shorten the push and the gather.
  zs_mlp "sync_streams4_$wire" "$wire" --same_host_streams_per_server=0
  # Synchronous with the engine's staging in the backend's own pinned
  # memory (before shared buffers): the client copies each push into its
  # segment and each gathered piece out of it.
  zs_mlp "sync_copied_$wire" "$wire" --shared_staging=false
  fsdp2_mlp "$wire"
done
PYTHONUNBUFFERED=1 python3 "$step_dir/pure_gpu_step.py" $(mlp_args) >"$out/pure_gpu.json" \
  2>"$out/pure_gpu.err" || tail -n 3 "$out/pure_gpu.err"
"$bin/optimizer_bench" --json --threads=$((SERVER_THREADS + 1)) --reps=3 ${OPTIMIZER_FLAGS:-} >"$out/optimizer.json" \
  2>"$out/optimizer.err" || tail -n 3 "$out/optimizer.err"
# What the host's memory gives our path's bytes, every stage at once and in
# sequence, with the server's kernels and the GPU's copies
# (path_floor_bench, bundled from build/bench/step/): the floor measured.
if [[ -x $bin/path_floor_bench ]]; then
  "$bin/path_floor_bench" --json --threads=$((SERVER_THREADS + 1)) >"$out/path_floor.json" \
    2>"$out/path_floor.err" || tail -n 3 "$out/path_floor.err"
fi
# The loss lines of an earlier run of the same model on the GPU, which a
# change that must not change a bit leaves as they were (REFERENCE= none;
# none by default when the model or backend is changed).
reference=${REFERENCE-}
if [[ -z ${REFERENCE+x} && -z ${MLP_HIDDEN:-}${MLP_INPUT:-}${MLP_OUTPUT:-}${MLP_BATCH:-}${BACKEND:-} ]]; then
  reference="$step_dir/../results/all-2026-12-01b"
fi
python3 "$step_dir/device_all_summary.py" --out "$out" --batch "${MLP_BATCH:-64}" \
  ${reference:+--reference "$reference"} | tee "$out/summary.json"
