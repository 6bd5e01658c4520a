#!/usr/bin/env bash
# transport_bench on the device machine with CPU accounting (c309bc7): the
# TCP plane at 1, 2 and 4 servers with 4 streams per server, then 4
# connections in all, 10 repetitions per figure, twice each. Recorded in
# bench/results/transport-2026-11-30/results.md ("Where the time goes").
# Bundle first:
#   ../shared/tools/device-bundle .device build/bench/transport/transport_bench \
#     build/server/zerostate-server
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_cpu.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
for round in 1 2; do
  run s4-$round 120 --server_binary=$s --planes=tcp --servers=1,2,4 --reps=10 --json
  run conn4-$round 120 --server_binary=$s --planes=tcp --servers=2 --streams=2 --reps=10 --json
  run conn4x1-$round 120 --server_binary=$s --planes=tcp --servers=4 --streams=1 --reps=10 --json
done
