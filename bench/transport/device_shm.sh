#!/usr/bin/env bash
# transport_bench on the device machine (16 cores) with the same-host plane
# next to TCP and gRPC, in one run: the shm / TCP ratios are the
# "...shm_vs_tcp" figures (docs/performance.md, "The same-host plane").
# Bundle first: ../shared/tools/device-bundle .device \
#   build-client/bench/transport/transport_bench build-client/server/zerostate-server
# then, there: source .device/env.sh && bench/transport/device_shm.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
run shm 200 --server_binary=$s --planes=tcp,shm --servers=1,4 --server_threads=8 --reps=3
run shm-json 200 --server_binary=$s --planes=grpc,tcp,shm --servers=1 --server_threads=8 \
  --tensor_mib=512 --reps=3 --json
