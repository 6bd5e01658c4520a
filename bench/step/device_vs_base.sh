#!/usr/bin/env bash
# The "no slower" check on the GPU machine: transport_bench and
# step_bench of a base commit (c9c47ac) and of this tree, run alternately in
# one run on one host, best of the repetitions of each, then a --json line per
# figure with this tree's speed over the base's (> 1: this tree is faster).
#   bash bench/step/device_vs_base.sh BASE_BIN NEW_BIN OUT
# (REPS alternations, default 2; SERVER_THREADS, default 8.)
# BASE_BIN holds the base's zerostate-server, transport_bench, step_bench
# (built at the base commit); NEW_BIN this tree's. The base's step_bench has
# no --server_binary flag: it starts the server at the path compiled in,
# given as BASE_SERVER_PATH (a link is made there).
set -uo pipefail
base=$1 new=$2 out=$3
reps=${REPS:-2}
threads=${SERVER_THREADS:-8}
mkdir -p "$out"
if [[ -n ${BASE_SERVER_PATH:-} ]]; then
  mkdir -p "$(dirname "$BASE_SERVER_PATH")" && ln -sf "$(realpath "$base/zerostate-server")" "$BASE_SERVER_PATH"
fi
tb_flags=(--json --planes=grpc,tcp --servers=1,4 --reps=2 --server_threads="$threads")
sb_flags=(--json --server_threads="$threads" --steps=5)
for r in $(seq 1 "$reps"); do
  for side in base new; do
    dir=${!side}
    extra=()
    [[ $side == new ]] && extra=(--server_binary="$dir/zerostate-server")
    "$dir/transport_bench" "${tb_flags[@]}" --server_binary="$dir/zerostate-server" \
      >"$out/transport_${side}_$r.json" 2>"$out/transport_${side}_$r.err"
    "$dir/step_bench" "${sb_flags[@]}" "${extra[@]}" \
      >"$out/step_${side}_$r.json" 2>"$out/step_${side}_$r.err"
  done
done
python3 - "$out" "$reps" <<'PY'
import json, sys, glob, os
out, reps = sys.argv[1], int(sys.argv[2])
def best(side, kind):
    figs = {}
    for path in glob.glob(os.path.join(out, f"{kind}_{side}_*.json")):
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            f = json.loads(line)
            name, v, unit = f["figure"], float(f["value"]), f.get("unit", "")
            lower_better = unit in ("s", "ns", "ms")
            if name not in figs or (v < figs[name][0] if lower_better else v > figs[name][0]):
                figs[name] = (v, unit, lower_better)
    return figs
for kind in ("transport", "step"):
    b, n = best("base", kind), best("new", kind)
    for name in sorted(set(b) & set(n)):
        bv, unit, lower = b[name]
        nv = n[name][0]
        speed = (bv / nv if lower else nv / bv) if bv and nv else 0.0
        # "No slower" within the run-to-run noise of one host: 5%.
        print(json.dumps({"figure": f"{kind}.{name}", "base": bv, "new": nv, "unit": unit,
                          "new_speed_over_base": round(speed, 4), "limit": 0.95,
                          "met": speed >= 0.95}))
PY
