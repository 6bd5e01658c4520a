#!/usr/bin/env bash
# transport_bench on the device machine (bundle in .device/, see
# bench/results/transport-2026-11-30/results.md) against four server builds:
# old (protobuf copies, sync API), noargs (zero-copy data plane, gRPC's
# default server arguments), args (+ windows, write buffer, read chunks),
# frame (+ 1 MiB HTTP/2 frames both ways); then client settings against
# args. One log per run under $1; extra flags go to every run.
out=$1; shift
source "$(dirname "$0")/device_common.sh"
s=.device/bin/zerostate-server
run old       120 --server_binary=$s-old "$@"
run noargs    120 --server_binary=$s-noargs "$@"
run args      120 --server_binary=$s-args "$@"
run frame     120 --server_binary=$s-frame --channel_args=grpc.http2.max_frame_size=1048576 "$@"
run args-s8   120 --server_binary=$s-args --servers=1,4 --streams=8 "$@"
run args-c4s8 120 --server_binary=$s-args --servers=1,4 --channels=4 --streams=8 "$@"
run args-4m   120 --server_binary=$s-args --servers=1,4 --chunk_kib=4096 "$@"
run args-256k 120 --server_binary=$s-args --servers=1,4 --chunk_kib=256 "$@"
run old2      120 --server_binary=$s-old "$@"
run args2     120 --server_binary=$s-args --json "$@"
