#!/usr/bin/env bash
# transport_bench on the device machine: the server whose fp32 gathers copy
# from the RAM tier's resident state (this commit's server) against the one
# before it (overlapped sessions, Load of the whole block state), same
# client; then both planes for the new server. Recorded in
# bench/results/transport-2026-11-30.md ("Resident fp32 gathers").
# Bundle first:
#   cp build-client/server/zerostate-server /tmp/zsb/zerostate-server-before  # built at 1202274
#   ../shared/tools/device-bundle .device build/bench/transport/transport_bench \
#     build/server/zerostate-server /tmp/zsb/zerostate-server-before
#   strip .device/bin/*
# then, there: source .device/env.sh && bash bench/transport/device_resident.sh $OUT
out=$1
b=.device/bin/transport_bench
{ nproc; lscpu | grep -i 'model name'; uname -r; } > "$out/machine.txt" 2>&1
run() {
  name=$1; s=$2; shift 2
  echo "== $name: transport_bench --server_binary=$s $*" | tee -a "$out/all.log"
  timeout 150 "$b" --server_binary="$s" "$@" 2>&1 |
    grep -v '^\[server\|warning: --plaintext\|data plane on' | tee "$out/$name.log" >> "$out/all.log"
}
run resident .device/bin/zerostate-server --planes=tcp --servers=1,2,4 --reps=2
run before .device/bin/zerostate-server-before --planes=tcp --servers=1,2,4 --reps=2
run both-planes .device/bin/zerostate-server --servers=1,2,4 --reps=2
