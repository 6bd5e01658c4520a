#!/usr/bin/env bash
# transport_bench on the device machine: the server that receives node 0's
# fp32 pushes in place and decodes the first node's bf16 into the sum with
# non-temporal stores (this commit's server) against the one before it
# (2faa645), same client, TCP plane, in one command; then 2 streams per
# server (8 connections at 4 servers) and both planes. Recorded in
# bench/results/transport-2026-11-30/results.md ("In-place pushes").
# Bundle first:
#   ../shared/tools/device-bundle .device build/bench/transport/transport_bench \
#     build/server/zerostate-server /tmp/zsb/zerostate-server-before
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_inplace.sh $OUT
out=$1
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
run inplace 170 --server_binary=$s --planes=tcp --servers=1,2,4 --reps=3 --json
run before 170 --server_binary=$s-before --planes=tcp --servers=1,2,4 --reps=3 --json
run inplace-s2 100 --server_binary=$s --planes=tcp --servers=2,4 --streams=2 --reps=3 --json
run both-planes 130 --server_binary=$s --servers=1,2,4 --reps=2
