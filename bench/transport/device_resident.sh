#!/usr/bin/env bash
# transport_bench on the device machine: the server whose fp32 gathers copy
# from the RAM tier's resident state (this commit's server) against the one
# before it (overlapped sessions, Load of the whole block state), same
# client; then both planes for the new server. Recorded in
# bench/results/transport-2026-11-30/results.md ("Resident fp32 gathers").
# Bundle first:
#   cp build-client/server/zerostate-server /tmp/zsb/zerostate-server-before  # built at 1202274
#   ../shared/tools/device-bundle .device build/bench/transport/transport_bench \
#     build/server/zerostate-server /tmp/zsb/zerostate-server-before
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_resident.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
run resident 150 --server_binary=$s --planes=tcp --servers=1,2,4 --reps=2
run before 150 --server_binary=$s-before --planes=tcp --servers=1,2,4 --reps=2
run both-planes 150 --server_binary=$s --servers=1,2,4 --reps=2
