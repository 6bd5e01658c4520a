#!/usr/bin/env bash
# The 100.7M-parameter MLP on one GPU (as part 3 of bench/step/gpu_runs.sh)
# with pushes and gathers over the TCP data plane (the default) and over
# gRPC (--data_plane=false), one server on loopback, then the pure-GPU
# reference. Bundle on the development machine:
#   ../shared/tools/device-bundle .device build-cuda-auto/worker/zerostate-worker build/server/zerostate-server
# then, there:  bash bench/step/device_big.sh OUT_DIR
set -uo pipefail
out=${1:-${OUT:-/tmp/zerostate-gpu}}
mkdir -p "$out"
source "$(dirname "$0")/device_server.sh"  # bin, srv, the job token
for plane in tcp grpc; do
  cat > "$out/big_$plane.textproto" <<CFG
train { job_id: "big_$plane" model { input_dim: 2048 hidden: [8192, 8192] output_dim: 2048 }
        micro_batch_size: 64 steps: 12 block_elems: 262144 }
CFG
  flag=--data_plane=true
  [[ $plane == grpc ]] && flag=--data_plane=false
  WORLD_SIZE=1 "$bin/zerostate-worker" --config="$out/big_$plane.textproto" --servers="$srv" --plaintext \
    --metrics_port=0 --backend=cuda $flag >"$out/big_$plane.log" 2>&1
  echo "== $plane ($flag)"; tail -n 3 "$out/big_$plane.log"
done
python3 bench/step/pure_gpu_step.py --batch 64 | tee "$out/pure_gpu.json"
