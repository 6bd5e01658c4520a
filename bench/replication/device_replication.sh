#!/bin/bash
# Replicated shards on the GPU machine's CPU cores: the step with k = 0, 1
# and 2 backups per shard over the same jobs, the step's path alone (the
# backups' passes held out of the timed steps) and every pass inside them
# against the one-host bound, the backups' lag, and failover time
# (replication_bench: three zerostate-server processes on loopback, two
# nodes, bf16 wire, AdamW); also whether the kernel offers kTLS there.
# Needs the bundle:
#   ../shared/tools/device-bundle .device build/bench/replication/replication_bench build/server/zerostate-server
# Usage: bench/replication/device_replication.sh OUT
#   writes OUT/replication_bench_<size>m_lanes<lanes>.json (one JSON object
#   per figure: replication.path.k{1,2}_ratio against 1.15 and 1.3,
#   replication.inside.k{1,2}_ratio_vs_bound against 1.1,
#   replication.<setting>.k{1,2}_backups_behind_ms, replication.failover_s;
#   bench/replication/replication_bench.cc lists them all), the servers'
#   logs in OUT/replication_bench_*.err, OUT/machine.txt (lscpu, commit,
#   kTLS before and after `modprobe tls`).
# ZS_BIN=a folder with both binaries runs it without the bundle; SIZES
# (Mi parameters, default "16") and LANES (connections per backup, default
# "0": the servers' own choice) other settings. BASE=another
# zerostate-server (a baseline's, bundled under another name) runs the
# same bench beside each run of the bundle's, RUNS times (default 1), the
# order swapped every run (the baseline first in even runs): then the files
# end in _run<R>.json and _base_run<R>.json, and the last lines printed are
# each setting's k = 1 and k = 2 ratios of both servers, run by run, and
# their medians. SETTINGS (default
# "path,inside") is the bench's --settings: "path" alone skips the inside
# setting, the failover and the catch-up. ZS_SERVER_FLAGS: more server
# flags, comma-separated (the bench's --server_flags). About 90 s per run of both
# settings on the H100 host.
set -euo pipefail
out=${1:?usage: bench/replication/device_replication.sh OUT}
mkdir -p "$out"
if [[ -z ${ZS_BIN:-} ]]; then
  source .device/env.sh
  bin=.device/bin
else
  bin=$ZS_BIN
fi
{
  lscpu
  echo "commit: $(cat "$bin/../commit.txt" 2>/dev/null || git rev-parse --short HEAD)"
  echo "tcp_available_ulp before modprobe: $(cat /proc/sys/net/ipv4/tcp_available_ulp 2>&1)"
  modprobe tls 2>&1 || true
  echo "tcp_available_ulp after modprobe tls: $(cat /proc/sys/net/ipv4/tcp_available_ulp 2>&1)"
} >"$out/machine.txt" 2>&1
grep -E "tcp_available_ulp|^Model name|^CPU\(s\)" "$out/machine.txt"
# One bench run against server binary $1 into $out/$2.json (and .err).
bench() {
  "$bin/replication_bench" --json --params=$((size << 20)) --steps=8 --replica_lanes="$lanes" \
      --settings="${SETTINGS:-path,inside}" --server="$1" --server_flags="${ZS_SERVER_FLAGS:-}" >"$out/$2.json" 2>"$out/$2.err"
  echo "$2"
  grep -v '"replication.floor\.' "$out/$2.json"
}
for size in ${SIZES:-16}; do  # Mi parameters
  for lanes in ${LANES:-0}; do  # connections per backup for a step's sums
    name=replication_bench_${size}m_lanes${lanes}
    if [[ -z ${BASE:-} ]]; then
      bench "$bin/zerostate-server" "$name"
      continue
    fi
    for run in $(seq 1 "${RUNS:-1}"); do
      if ((run % 2 == 0)); then bench "$BASE" "${name}_base_run$run"; fi
      bench "$bin/zerostate-server" "${name}_run$run"
      if ((run % 2 == 1)); then bench "$BASE" "${name}_base_run$run"; fi
    done
    # Each server's ratios run by run, and their medians.
    python3 - "$out" "$name" <<'PY'
import glob, json, statistics, sys
out, name = sys.argv[1:]
for server, pattern in (("this", f"{name}_run*.json"), ("base", f"{name}_base_run*.json")):
    ratios = {}
    for path in sorted(glob.glob(f"{out}/{pattern}")):
        for line in open(path):
            fig = json.loads(line)
            if fig["figure"].endswith(("k1_ratio", "k2_ratio")):
                ratios.setdefault(fig["figure"], []).append(fig["value"])
    for figure, values in sorted(ratios.items()):
        print(f"{server} {figure}: median {statistics.median(values):.3f} of "
              + " ".join(f"{v:.3f}" for v in values))
PY
  done
done
