#!/usr/bin/env bash
# bench/cluster/gpu_wire.py on the GPU machine: GPT-2 759M (micro-batch 8,
# bf16, seq 1024, gradient accumulation 1), the state servers (2 x 6
# threads) on one namespaced host and the trainer on another, both links
# tbf-capped at $GBIT Gbit/s (default 25), the bf16 wire against the int8
# wire, synchronous and speculative steps, interleaved over 2 rounds in one
# process.
#
# On the development machine (the GPU machine has no iproute2: ip and tc
# travel in the bundle):
#   ../shared/tools/device-bundle .device build/server/zerostate-server \
#       build/client/libzerostate_client.so "$(command -v ip)" "$(command -v tc)"
#   strip .device/bin/zerostate-server .device/bin/libzerostate_client.so  # 26 MB in all
# then, there (run with carry [".device"]):
#   bash bench/cluster/device_gpu_wire.sh "$OUT" [bench_gpt.py args, e.g. --rounds=1]
# Here, on the CPU (the tiny GPT; build/ instead of a bundle):
#   ZS_BUNDLE=build-as-bundle bash bench/cluster/device_gpu_wire.sh /tmp/gw --device=cpu --tiny
# Environment: ZS_BUNDLE (default .device of this tree), GBIT,
# BENCH_LIMIT_S (default 540).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-${OUT:-/tmp/zerostate-gpu-wire}}
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$out"
if [[ ${ZS_BUNDLE:-} == build-as-bundle ]]; then
  server=$root/build/server/zerostate-server
  export ZEROSTATE_CLIENT_LIB=$root/build/client/libzerostate_client.so
else
  bundle=$(cd "${ZS_BUNDLE:-$root/.device}" && pwd)
  source "$bundle/env.sh"
  export PATH=$bundle/bin:$PATH ZEROSTATE_CLIENT_LIB=$bundle/bin/libzerostate_client.so
  server=$bundle/bin/zerostate-server
fi
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
  nproc; ip -V; } | tee "$out/machine.txt"
timeout "${BENCH_LIMIT_S:-540}" python3 "$root/bench/cluster/gpu_wire.py" --gbit="${GBIT:-25}" \
  --server_bin="$server" --servers=2 --server_threads=6 --logs="$out/logs" -- \
  --model=gpt2-759m --accum=1 --systems=sync,speculative --rounds=2 --json "$@" \
  > "$out/gpu_wire.json"
rc=$?
echo "gpu_wire.py rc=$rc"
tail -n 20 "$out/logs/bench_gpt.log"
python3 - "$out/gpu_wire.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for mode, f in r["runs"][0]["zerostate"].items():
    print(mode, {k: round(f[k], 4) for k in ("step_s", "compute_s", "wire_floor_s",
          "step_over_wire_floor", "bf16_step_over_this") if k in f})
PY
exit $rc
