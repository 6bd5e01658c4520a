#!/usr/bin/env bash
# step_bench (CPU backend, its own server on loopback) on the GPU machine's
# cores in variants, alternating, to tell what moves `server_step` and
# `overlap` there: the default; 4 client streams per server (the default
# before df0b7c9 raised same-host servers to 8); the whole landing (no
# forward beside the server's pass); fewer server threads (cores left to
# the trainer's compute and the client's streams); bf16 on the wire.
# Each variant ROUNDS times.
#   bash bench/step/device_step_bench.sh OUT_DIR
# Env: ROUNDS (2), VARIANTS (default streams4 whole threads12), ZS_BIN
# (.device/bin), STEP_FLAGS (extra step_bench flags).
set -uo pipefail
out=${1:?usage: device_step_bench.sh OUT_DIR}
bin=${ZS_BIN:-.device/bin}
mkdir -p "$out"
flags_of() {
  case "$1" in
    default) echo "--server_threads=15" ;;
    streams4) echo "--server_threads=15 --streams_per_server=4" ;;
    whole) echo "--server_threads=15 --whole_landing" ;;
    threads12) echo "--server_threads=12" ;;
    bf16) echo "--server_threads=15 --wire=bf16" ;;
    *) echo "device_step_bench.sh: unknown variant $1" >&2; return 1 ;;
  esac
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in ${VARIANTS:-default streams4 whole threads12}; do
    f=$(flags_of "$v") || exit 2
    # shellcheck disable=SC2086 # flags are words
    "$bin/step_bench" --json --speculative=false --steps=5 --server_binary="$bin/zerostate-server" \
      $f ${STEP_FLAGS:-} 2>"$out/${v}_$round.err" | sed "s/\"figure\":\"/\"figure\":\"$v.$round./" |
      tee "$out/${v}_$round.json"
  done
done
