# replica_nice / lanes sweep on the path setting, alternated round by round.
set -u
out=$1; cd "$(dirname "$0")/.."; source .device2/env.sh
T0=$SECONDS
nproc > $out/nproc.txt; cp .device2/commit.txt $out/
for r in 1 2 3 4 5 6 7 8 9 10; do
  for cfg in n0:0:0 n10:10:0 l2:0:2; do
    (( SECONDS - T0 < ${BUDGET:-420} )) || break 2
    IFS=: read name nice lanes <<< "$cfg"
    ZS_BIN=.device2/bin LANES=$lanes SETTINGS=path ZS_SERVER_FLAGS=--replica_nice=$nice timeout 40 bash bench/replication/device_replication.sh "$out/$name-r$r" > "$out/$name-r$r.log" 2>&1
    echo "$name r$r $(grep -h '"replication.path.k[12]_ratio"' $out/$name-r$r/*.json | sed 's/.*path.\(k[12]\)_ratio","value":\([0-9.]*\).*/\1=\2/' | tr '\n' ' ')"
  done
done
python3 - $out <<'PY'
import glob, json, statistics, sys, os, re
out=sys.argv[1]; by={}
for f in glob.glob(out+'/*-r*/*.json'):
    name=os.path.basename(os.path.dirname(f)).split('-r')[0]
    for line in open(f):
        d=json.loads(line)
        m=re.match(r'replication\.path\.(k[12])_ratio$', d['figure'])
        if m: by.setdefault((name,m.group(1)),[]).append(d['value'])
for k in sorted(by): print(k, len(by[k]), 'median %.3f' % statistics.median(by[k]))
PY
tar -czf $out/call.tar.gz -C $out --exclude call.tar.gz .
