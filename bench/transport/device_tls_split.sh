#!/usr/bin/env bash
# device_tls.sh with the split run: the TLS target as usual (client and
# servers sharing every core), then again with the client on the first half
# of the cores and the servers on the other half, plaintext and TLS alike,
# so that the figure tells the cipher's cost from the contention of client
# and servers for the same cores; stream_bench left out (device time).
#   source .device/env.sh && bench/transport/device_tls_split.sh $OUT [ARGS]
# ZS_TLS_SPLIT=CLIENT_CPUS/SERVER_CPUS overrides the halves (taskset lists).
set -u
n=$(nproc)
half=$((n / 2))
[ "$half" -ge 1 ] || { echo "device_tls_split.sh: needs at least 2 cores"; exit 1; }
export ZS_TLS_SPLIT=${ZS_TLS_SPLIT:-0-$((half - 1))/$half-$((n - 1))}
export ZS_STREAM_MIB=${ZS_STREAM_MIB:-0}
exec bash "$(dirname "$0")/device_tls.sh" "$@"
