#!/usr/bin/env bash
# ab_bundle.sh BUNDLE BASE_TREE NEW_TREE [BASE_BUILD NEW_BUILD]
# The bundle bench/torch/device_ab.sh takes to the GPU machine, made on the
# development machine: for each side (base, new; two worktrees at their
# commits, built in BASE_BUILD and NEW_BUILD, default TREE/build) its
# zerostate-server and libzerostate_client.so, stripped, in BUNDLE/SIDE/bin
# and its committed python/, bench/torch/, examples/gpt/ and
# tests/python/zs_servers.py (bench_gpt.py's metric scrape) in
# BUNDLE/SIDE/tree; every library they need in BUNDLE/lib
# (../shared/tools/device-bundle), and env.sh.
#   bash bench/torch/ab_bundle.sh .device-ab /work/main /work/wt-engine
set -euo pipefail
bundle=$1 base=$2 new=$3
builds=("${4:-$base/build}" "${5:-$new/build}")
trees=("$base" "$new")
sides=(base new)
bins=(server/zerostate-server client/libzerostate_client.so)
tool="$(cd "$(dirname "$0")/../../.." && pwd)/shared/tools/device-bundle"
for i in 0 1; do
  "$tool" "$bundle" "${bins[@]/#/${builds[$i]}/}" > /dev/null  # its libraries into lib/
  side=$bundle/${sides[$i]}
  rm -rf "$side" && mkdir -p "$side/tree"
  mv "$bundle/bin" "$side/bin"
  strip -s "$side"/bin/*
  git -C "${trees[$i]}" archive HEAD python bench/torch examples/gpt \
    $(git -C "${trees[$i]}" ls-files tests/python/zs_servers.py) | tar -x -C "$side/tree"
  git -C "${trees[$i]}" log --oneline -1 > "$side/commit.txt"
done
du -sh "$bundle"
