#!/usr/bin/env bash
# transport_bench on the device machine (bundle in .device/, see
# bench/results/transport-2026-11-30.md) against four server builds:
# old (protobuf copies, sync API), noargs (zero-copy data plane, gRPC's
# default server arguments), args (+ windows, write buffer, read chunks),
# frame (+ 1 MiB HTTP/2 frames both ways); then client settings against
# args. One log per run under $1; extra flags go to every run.
out=$1; shift
b=.device/bin/transport_bench
s=.device/bin/zerostate-server
run() { name=$1; shift; echo "== $name: transport_bench $*" | tee -a "$out/all.log"; timeout 120 "$b" "$@" 2>&1 | grep -v '^\[server\|warning: --plaintext' | tee "$out/$name.log" >> "$out/all.log"; }
{ nproc; lscpu | grep -i 'model name'; uname -r; } > "$out/machine.txt" 2>&1
run old      --server_binary=$s-old "$@"
run noargs   --server_binary=$s-noargs "$@"
run args     --server_binary=$s-args "$@"
run frame    --server_binary=$s-frame --channel_args=grpc.http2.max_frame_size=1048576 "$@"
run args-s8   --server_binary=$s-args --servers=1,4 --streams=8 "$@"
run args-c4s8 --server_binary=$s-args --servers=1,4 --channels=4 --streams=8 "$@"
run args-4m   --server_binary=$s-args --servers=1,4 --chunk_kib=4096 "$@"
run args-256k --server_binary=$s-args --servers=1,4 --chunk_kib=256 "$@"
run old2     --server_binary=$s-old "$@"
run args2    --server_binary=$s-args --json "$@"
