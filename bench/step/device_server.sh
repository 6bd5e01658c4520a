# Sourced by the bench/step device scripts: sets `out`, the folder for the
# logs (the script's first argument, else $OUT, else /tmp/zerostate-gpu,
# unless already set), loads the bundle's environment, records the GPUs, starts one
# zerostate-server on loopback (stopped when the script exits) and sets
#   bin   the bundle's binaries (ZS_BIN overrides: a build's binaries in
#         one folder, for a check on a machine without the bundle),
#   srv   the server's address,
# and exports one job token for every worker of the script. SERVER_FLAGS
# adds flags to the server's command line; SERVER names another server
# binary (default $bin/zerostate-server).
out=${out:-${1:-${OUT:-/tmp/zerostate-gpu}}}
mkdir -p "$out"
[[ -z ${ZS_BIN:-} ]] && source .device/env.sh
bin=${ZS_BIN:-.device/bin}
nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null | tee "$out/gpus.txt"
"${SERVER:-$bin/zerostate-server}" --listen=127.0.0.1:0 --plaintext --metrics_listen="${SERVER_METRICS:-}" --threads="${SERVER_THREADS:-8}" ${SERVER_FLAGS:-} >"$out/server.log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out/server.log" && break; sleep 0.1; done
srv=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$out/server.log")
echo "server $srv"
ZEROSTATE_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ZEROSTATE_JOB_TOKEN
