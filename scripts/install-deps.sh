#!/usr/bin/env bash
# Installs the Debian 12 packages zerostate builds and tests with.
# Idempotent and quiet when everything is already there.
set -euo pipefail
pkgs=(
  cmake ninja-build g++ pkg-config
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev prometheus-cpp-dev liburing-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-numpy python3-grpcio
  prometheus python3-yaml
  clang-14 libclang-rt-14-dev
  python3-torch
  etcd-server
  iproute2
)
# clang-14, libclang-rt-14-dev: the sanitizer build of make test-asan and
# make fuzz (ASan/UBSan, the lock check -Werror=thread-safety, tests/fuzz),
# and its sanitizer and libFuzzer runtimes.
# python3-torch: PyTorch on the CPU for tests/python (the zerostate package).
# etcd-server: a real etcd for the membership and fencing tests (label etcd).
# iproute2: ip netns, veth, bridge and tc for the namespaced hosts of
# tests/testing/netns_cluster.py (partition tests, bench/cluster).
pkgs+=("$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
(( ${#missing[@]} == 0 )) && exit 0
echo "installing: ${missing[*]}"
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null || true
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
