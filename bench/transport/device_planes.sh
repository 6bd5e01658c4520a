#!/usr/bin/env bash
# transport_bench on the device machine with both planes (grpc, tcp):
# the run recorded in bench/results/transport-2026-11-30.md ("Two planes").
# Bundle first: ../shared/tools/device-bundle .device \
#   build-client/bench/transport/transport_bench build-client/server/zerostate-server
# then, there: source .device/env.sh && bench/transport/device_planes.sh $OUT
out=$1
b=.device/bin/transport_bench
s=.device/bin/zerostate-server
{ nproc; lscpu | grep -i 'model name'; uname -r; } > "$out/machine.txt" 2>&1
run() { name=$1; shift; echo "== $name: transport_bench $*" | tee -a "$out/all.log"; timeout $T "$b" --server_binary=$s "$@" 2>&1 | grep -v '^\[server\|warning: --plaintext\|data plane on' | tee "$out/$name.log" >> "$out/all.log"; }
T=230 run planes --reps=2
T=150 run tcp-s8 --planes=tcp --servers=1,4 --streams=8 --reps=2
T=60 run planes-json --servers=4 --reps=2 --json
