#!/usr/bin/env bash
# What a job admitted without its bf16 weight copies pays on its gathers:
# transport_bench's bf16 gather, one server, with a RAM budget that has room
# for the copies against one that has room only without them (the server
# then converts the master as each gather copies it out), the same binary,
# alternated RUNS times (default 3) per plane (tcp, shm_shared).
#   bench/capacity/gather_convert.sh OUT [BUILD]
# Writes OUT/<plane>_<copies|converted>_run<R>.json (transport_bench --json)
# and OUT/summary.json: per plane, the median bf16 gather GB/s of each and
# their ratio (converted over copies). The budget: the bench registers an
# fp32 job (12 B per parameter) and then a bf16 one (10 B without copies,
# 12 with); 23 B per parameter of the tensor admits both only without.
set -euo pipefail
out=${1:?usage: gather_convert.sh OUT [BUILD]}
build=$(cd "${2:-build}" && pwd)
mkdir -p "$out"
mib=${TENSOR_MIB:-256}
elems=$((mib << 18))
wrap=$(mktemp -d)
trap 'rm -rf "$wrap"' EXIT
for kind in copies converted; do
  if [[ $kind == copies ]]; then budget=$((4 * 23 * elems)); else budget=$((23 * elems)); fi
  printf '#!/bin/sh\nexec %s "$@" --ram_budget_bytes=%s 2>>%s/%s.log\n' \
    "$build/server/zerostate-server" "$budget" "$out" "$kind" > "$wrap/$kind"
  chmod +x "$wrap/$kind"
done
for plane in tcp shm_shared; do
  for run in $(seq 1 "${RUNS:-3}"); do
    for kind in copies converted; do
      "$build/bench/transport/transport_bench" --planes="$plane" --servers=1 \
        --tensor_mib="$mib" --reps=3 --json --server_binary="$wrap/$kind" \
        > "$out/${plane}_${kind}_run$run.json" 2> /dev/null
    done
  done
done
grep -c "admitted without weight copies" "$out/converted.log" > /dev/null ||
  { echo "gather_convert.sh: the tight budget kept the copies" >&2; exit 1; }
/usr/bin/python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
summary = {}
for plane in ("tcp", "shm_shared"):
    med = {}
    for kind in ("copies", "converted"):
        values = []
        for path in sorted(glob.glob(f"{out}/{plane}_{kind}_run*.json")):
            for line in open(path):
                fig = json.loads(line)
                if fig["figure"] == f"gather.bf16.servers=1.{plane}":
                    values.append(fig["value"])
        med[kind] = statistics.median(values)
        summary[f"gather_convert.{plane}.{kind}_gbps"] = values
    summary[f"gather_convert.{plane}.ratio"] = med["converted"] / med["copies"]
    print(f"{plane}: bf16 gather GB/s, copies {med['copies']:.2f}, "
          f"converted {med['converted']:.2f}: {med['converted'] / med['copies']:.3f}")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
PY
