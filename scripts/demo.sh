#!/usr/bin/env bash
# README's `make demo`, the PyTorch path: two zerostate-server processes on
# loopback (plaintext), and examples/gpt's GPT trained through
# zerostate.torch by two ranks of one node (torchrun, gloo on the CPU).
# Prints rank 0's loss as it falls; then trains the same job in one process
# by torch.optim.AdamW (examples/gpt/train.py --reference=2) and prints how
# far the two runs' final weights are apart; writes both loss curves as an
# SVG; prints where the servers' metrics and the Grafana dashboard are.
# Stops everything on exit, also on Ctrl-C or an error.
#   scripts/demo.sh [BUILD_DIR] [STEPS] [OUT_DIR]   (OUT_DIR: BUILD_DIR/demo)
# Needs zerostate-server and libzerostate_client.so built (make demo builds
# only those two) and PyTorch in $PYTHON (default Debian's /usr/bin/python3
# with python3-torch).
set -euo pipefail
build=${1:-build}
steps=${2:-80}
out=${3:-$build/demo}
python=${PYTHON:-/usr/bin/python3}
cd "$(dirname "$0")/.."
[[ $build == /* ]] || build=$PWD/$build
server_bin=$build/server/zerostate-server
export ZEROSTATE_CLIENT_LIB=$build/client/libzerostate_client.so
for f in "$server_bin" "$ZEROSTATE_CLIENT_LIB"; do
  [[ -e $f ]] || { echo "demo: $f not built (run: make demo)" >&2; exit 1; }
done
"$python" -c "import torch" 2>/dev/null ||
  { echo "demo: $python has no torch (Debian: apt-get install python3-torch)" >&2; exit 1; }
mkdir -p "$out"

source scripts/demo_lib.sh

start_server 0
start_server 1
servers=$(server_addresses 0 1)
echo "demo: state servers at $servers (plaintext, loopback)"

# One thread per rank: two ranks and two servers share the machine's cores
# (torchrun sets the same, with a banner, when it is unset).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# The job's token, shared by both ranks through the environment only.
ZEROSTATE_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export ZEROSTATE_JOB_TOKEN
train=(examples/gpt/train.py --steps="$steps")
echo "demo: training examples/gpt's GPT through zerostate.torch, 2 ranks, $steps steps"
# torch 1.13's torchrun under Python 3.11 fails on its default --redirects=0
# and --tee=0 (Std.from_str finds no flag for 0 there); redirecting and
# teeing stdout (1) works, and keeps each rank's log under --log_dir.
"$python" -m torch.distributed.run --standalone --nproc_per_node=2 \
  --log_dir="$tmp/torchrun" --redirects=1 --tee=1 \
  "${train[@]}" --servers="$servers" --plaintext --job="demo-$$" \
  --loss_log="$tmp/zerostate.json" --save_weights="$tmp/zerostate.pt" |
  sed -u -n 's/^\[default0\]:\(step .*\)/demo:   \1/p'
echo "demo: the same training by torch.optim.AdamW in one process (the reference)"
"$python" "${train[@]}" --reference=2 --loss_log="$tmp/adamw.json" \
  --save_weights="$tmp/adamw.pt" >/dev/null
"$python" scripts/demo_report.py "$tmp/zerostate.json" "$tmp/adamw.json" \
  "$tmp/zerostate.pt" "$tmp/adamw.pt" "$out/loss.svg"
print_metrics 0 1
echo "demo: the Grafana dashboard for them: deploy/grafana/zerostate.json (docs/metrics.md lists every metric)"
echo "demo: done; stopping the servers"
