#!/usr/bin/env bash
# deploy/launcher/zerostate-launch: the torchrun-style variables of every
# local rank, failure propagation, signal forwarding, and every bad argument
# refused with exit 2 and a message naming it.
set -uo pipefail
launch=$(cd "$(dirname "$0")/../.." && pwd)/deploy/launcher/zerostate-launch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then echo "ok   $1"; else echo "FAIL $1: want [$2] got [$3]"; fails=$((fails + 1)); fi
}

out=$("$launch" --nnodes 2 --nproc-per-node 3 --node-rank 1 -- \
  sh -c 'echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $NODE_RANK' | sort)
check "variables per local rank" $'3 0 6 3 1\n4 1 6 3 1\n5 2 6 3 1' "$out"

out=$(NNODES=4 NPROC_PER_NODE=2 JOB_COMPLETION_INDEX=3 "$launch" -- sh -c 'echo $RANK' | sort)
check "defaults from an Indexed Job's environment" $'6\n7' "$out"

# Rank 1 fails at once; rank 0 would sleep 30 s but must be stopped.
"$launch" --nproc-per-node 2 -- sh -c '[ $LOCAL_RANK = 1 ] && exit 3; exec sleep 30' 2>"$tmp/err"
check "a failed rank's status is the launcher's" 3 $?
check "the failure is named" 1 "$(grep -c 'local rank 1 exited with status 3' "$tmp/err")"

"$launch" --nproc-per-node 2 -- sleep 30 2>/dev/null &
lp=$!
# Wait until both children run (no fixed sleep: poll the process tree).
for _ in $(seq 200); do (($(pgrep -P $lp -c sleep) == 2)) && break; sleep 0.05; done
kill -TERM $lp
wait $lp
check "SIGTERM is passed on to every rank" 143 $?

bad() {  # bad NAME EXPECTED_MESSAGE ARGS...
  local name=$1 msg=$2; shift 2
  "$launch" "$@" 2>"$tmp/err"
  check "$name: exit 2" 2 $?
  check "$name: message" 1 "$(grep -c -- "$msg" "$tmp/err")"
}
bad "nproc not a number" "--nproc-per-node must be a positive integer, got 'x'" --nproc-per-node x -- true
bad "nnodes zero" "--nnodes must be a positive integer, got '0'" --nnodes 0 -- true
bad "node rank too large" "--node-rank 2 must be below --nnodes 2" --nnodes 2 --node-rank 2 -- true
bad "node rank negative" "--node-rank must be an integer >= 0, got '-1'" --node-rank -1 -- true
bad "no command" "no command given after --" --nnodes 1
bad "missing value" "--nnodes needs a value" --nnodes
bad "unknown argument" "unknown argument '--gpus'" --gpus 2 -- true

((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
echo "PASS: launcher"
