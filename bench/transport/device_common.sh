# Sourced by the bench/transport/device_*.sh scripts, with `out` set to the
# folder for the logs: records the machine, and defines
#   run NAME SECONDS ARGS...
# which runs transport_bench ARGS for at most SECONDS, its output (server
# start lines left out) into $out/NAME.log and, after a header line, $out/all.log.
b=.device/bin/transport_bench
{ nproc; lscpu | grep -i 'model name'; uname -r; } > "$out/machine.txt" 2>&1
run() {
  local name=$1 seconds=$2
  shift 2
  echo "== $name: transport_bench $*" | tee -a "$out/all.log"
  timeout "$seconds" "$b" "$@" 2>&1 |
    grep -v '^\[server\|warning: --plaintext\|data plane on' | tee "$out/$name.log" >> "$out/all.log"
}
