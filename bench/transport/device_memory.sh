#!/usr/bin/env bash
# transport_bench on the device machine, second round: three servers, each
# run twice, interleaved, TCP plane:
#   inplace  this commit's server (node 0's fp32 pushes received in place);
#   ntcopy   the same with the in-place receive turned off (fp32 payloads
#            read into a cached buffer, then copied into the sum with
#            non-temporal stores), built from a patched copy;
#   before   2faa645 (plain copy and decode into the sum);
# then 4 connections in all at every server count (1x4, 2x2, 4x1), where
# the host's memory is not the limit. Recorded in
# bench/results/transport-2026-11-30/results.md ("In-place pushes").
# Bundle first:
#   ../shared/tools/device-bundle .device build/bench/transport/transport_bench \
#     build/server/zerostate-server /tmp/zsb/zerostate-server-before /tmp/zsb/zerostate-server-ntcopy
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_memory.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
for round in 1 2; do
  for v in inplace ntcopy before; do
    bin=$s
    [[ $v != inplace ]] && bin=$s-$v
    run $v-$round 90 --server_binary=$bin --planes=tcp --servers=1,2,4 --reps=3 --json
  done
done
run conn4-s2 60 --server_binary=$s --planes=tcp --servers=2 --streams=2 --reps=3 --json
run conn4-s4 60 --server_binary=$s --planes=tcp --servers=4 --streams=1 --reps=3 --json
run conn4-s1 60 --server_binary=$s --planes=tcp --servers=1 --streams=4 --reps=3 --json
