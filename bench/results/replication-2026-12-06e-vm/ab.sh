#!/bin/bash
# Alternated A/B of replication_bench's step's path on this machine: main's
# server and this branch's, in turns (the order swapped each round), each
# run under perf stat (the run's CPU and page faults), the load before each.
# Usage: ab.sh MAIN_SERVER NEW_SERVER BENCH ROUNDS OUT [SETTINGS]
set -euo pipefail
main=$1 new=$2 bench=$3 rounds=$4 out=$5 settings=${6:-path}
mkdir -p "$out"
prefix=$([[ $settings == path ]] && echo path || echo both)
for n in $(seq 1 "$rounds"); do
  order="main new"; (( n % 2 == 0 )) && order="new main"
  for s in $order; do
    server=$([[ $s == main ]] && echo "$main" || echo "$new")
    echo "$prefix-$s-$n $(cat /proc/loadavg)" >>"$out/load.txt"
    nice -n 19 perf stat -e task-clock,page-faults -x, -o "$out/stat-$prefix-$s-$n.txt" \
      "$bench" --json --settings="$settings" --steps=8 --params=16777216 --server="$server" \
      >"$out/$prefix-$s-$n.json" 2>"$out/$prefix-$s-$n.err"
  done
done
