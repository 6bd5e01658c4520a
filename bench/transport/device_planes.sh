#!/usr/bin/env bash
# transport_bench on the device machine with both planes (grpc, tcp):
# the run recorded in bench/results/transport-2026-11-30/results.md ("Two planes").
# Bundle first: ../shared/tools/device-bundle .device \
#   build-client/bench/transport/transport_bench build-client/server/zerostate-server
# then, there: source .device/env.sh && bench/transport/device_planes.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
run planes 230 --server_binary=$s --reps=2
run tcp-s8 150 --server_binary=$s --planes=tcp --servers=1,4 --streams=8 --reps=2
run planes-json 60 --server_binary=$s --servers=4 --reps=2 --json
