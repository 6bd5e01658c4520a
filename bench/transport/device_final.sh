#!/usr/bin/env bash
# transport_bench on the device machine, the figures docs/performance.md
# quotes (a98292e): both planes at 1, 2 and 4 servers with the defaults (4
# data plane connections and 2 gRPC channels per server), then the TCP
# plane with 4 connections in all (--connections=4), 10 repetitions per
# figure, each twice. Recorded in bench/results/transport-2026-11-30/results.md
# ("Final figures").
# Bundle first:
#   ../shared/tools/device-bundle .device build/bench/transport/transport_bench \
#     build/server/zerostate-server
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_final.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
for round in 1 2; do
  run default-$round 200 --server_binary=$s --servers=1,2,4 --reps=10 --json
  run conn4-$round 100 --server_binary=$s --planes=tcp --servers=1,2,4 --connections=4 --reps=10 --json
done
