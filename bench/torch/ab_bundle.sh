#!/usr/bin/env bash
# ab_bundle.sh BUNDLE BASE_TREE [BASE_BUILD]
# The bundle bench/torch/device_ab.sh takes to the GPU machine, made on the
# development machine from the root of this tree (built): this tree's
# zerostate-server and libzerostate_client.so in BUNDLE/bin with every
# library they need (../shared/tools/device-bundle), and the base's (a
# worktree at another commit, e.g. /work/main, built in BASE_BUILD, default
# BASE_TREE/build) in BUNDLE/base/bin, with its committed python/,
# bench/torch/ and examples/gpt/ in BUNDLE/base/tree. Binaries stripped.
set -euo pipefail
bundle=$1 base=$2 base_build=${3:-$2/build}
bins=(server/zerostate-server client/libzerostate_client.so)
"$(dirname "$0")/../../../shared/tools/device-bundle" "$bundle" "${bins[@]/#/build/}"
mkdir -p "$bundle/base/bin" "$bundle/base/tree"
for b in "${bins[@]}"; do cp -L "$base_build/$b" "$bundle/base/bin/"; done
git -C "$base" archive HEAD python bench/torch examples/gpt | tar -x -C "$bundle/base/tree"
strip -s "$bundle"/bin/* "$bundle"/base/bin/*
git -C "$base" log --oneline -1 > "$bundle/base/commit.txt"
du -sh "$bundle"
