#!/usr/bin/env bash
# transport_bench under TLS against plaintext, in one run, on the device
# machine: the TCP data plane under TLS (OpenSSL's records: kTLS where the
# kernel offers it, "records" in the JSON says what was used) at >= 0.6 of
# the plaintext data plane, at 1 and 4 servers, fp32 and bf16, push and
# gather; the client sized as a default client is (client/data_streams.h:
# plaintext at 4 streams per server; TLS at one stream per core over all
# servers, at most 8 per server, at least 1). Runs:
#   ktls        whether the kernel has the tls module (ktls.txt);
#   aes         `openssl speed -evp aes-128-gcm` on one core (aes.txt): the
#               cipher's raw rate, the floor of the TLS CPU s/GB;
#   stream      stream_bench: the byte stream alone, plaintext and TLS,
#               1/4/8 connections (what OpenSSL's records cost per connection);
#   tls-tcp     the target, with the CPU s/GB of client and servers;
# target.txt: bench/transport/tls_target.py's figures and table.
# Bundle first: ../shared/tools/device-bundle .device \
#   build/bench/transport/transport_bench build/bench/transport/stream_bench \
#   build/server/zerostate-server
# then, there: source .device/env.sh && bench/transport/device_tls.sh $OUT
# Extra arguments go to the transport_bench run, last (they win): e.g.
# a small check: device_tls.sh /tmp/out --tensor_mib=16 --servers=1 --reps=1
# (ZS_STREAM_MIB sets stream_bench's MiB per connection, default 512; 0
# skips it.)
# ZS_TLS_SPLIT=CLIENT_CPUS/SERVER_CPUS (taskset lists, e.g. 0-7/8-15) runs
# the target a second time with the client on the first cores and the
# servers on the others, plaintext and TLS alike (tls-tcp-split.log,
# target-split.txt, its ceiling per side): what the cipher costs apart from
# client and servers contending for the same cores (device_tls_split.sh).
# (ZS_DEVICE_DIR names the bundle's folder, default .device.)
# Needs the openssl tool, or certificates made beforehand in .device/tls
# (ca.pem, server.pem/.key for 127.0.0.1, client.pem/.key).
set -u
out=$1
shift
mkdir -p "$out"
source "$(dirname "$0")/device_common.sh"
dev=${ZS_DEVICE_DIR:-.device}  # the bundle's folder
bin=$dev/bin
b=$bin/transport_bench
s=$bin/zerostate-server
certs=$dev/tls
if [ ! -f "$certs/client.pem" ]; then
  # Throwaway certificates, outside $out: the run's keys are not results.
  certs=$(mktemp -d)
  certs_tmp=$certs
  trap 'rm -rf "$certs"' EXIT
  key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  (cd "$certs" &&
    openssl req -x509 $key -days 30 -subj /CN=zs-bench-ca -keyout ca.key -out ca.pem &&
    echo "subjectAltName=IP:127.0.0.1,DNS:localhost" > server.ext &&
    for n in server client; do
      openssl req $key -subj /CN=zs-bench-$n -keyout $n.key -out $n.csr &&
        openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
          -out $n.pem $([ $n = server ] && echo -extfile server.ext) || exit 1
    done) > "$out/openssl.log" 2>&1 || { echo "cannot make certificates: see $out/openssl.log"; exit 1; }
fi
# Whether the kernel offers TLS offload: modprobe where allowed (may fail
# without privileges; the bench's "records" field says what was used).
{ echo "lsmod: $(lsmod 2>&1 | grep -w tls)"; modprobe tls 2>&1; echo "tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp)";
  grep -w '^tls' /proc/modules; } > "$out/ktls.txt" 2>&1
cat "$out/ktls.txt"
# The cipher alone, one core: 16 KiB blocks (one TLS record).
echo "== aes: openssl speed -evp aes-128-gcm" | tee -a "$out/all.log"
openssl speed -elapsed -seconds 3 -evp aes-128-gcm -bytes 16384 > "$out/aes.txt" 2>&1
grep -i 'aes-128-gcm' "$out/aes.txt" | tail -1 | tee -a "$out/all.log"
# The byte stream alone: plaintext against TLS per connection.
if [ "${ZS_STREAM_MIB:-512}" != 0 ]; then
  echo "== stream: stream_bench" | tee -a "$out/all.log"
  timeout 120 "$bin/stream_bench" --connections=1,4,8 --mib="${ZS_STREAM_MIB:-512}" --reps=2 \
    --json 2>&1 | tee "$out/stream.log" >> "$out/all.log"
fi
# The data plane, plaintext / TLS (mutual), 1 and 4 servers (ZS_TLS_SPLIT_ONLY
# set: only the split run below).
if [ -z "${ZS_TLS_SPLIT_ONLY:-}" ]; then
  run tls-tcp 300 --server_binary=$s --planes=tcp --servers=1,4 --reps=3 --tls_dir=$certs \
    --json "$@"
  python3 "$(dirname "$0")/tls_target.py" "$out/tls-tcp.log" "$out/aes.txt" "$(nproc)" |
    tee "$out/target.txt"
fi
[ -n "${ZS_TLS_SPLIT:-}" ] || exit 0
# The same on disjoint cores: wrappers that pin the bench (the client) and
# each server it starts (exec: the server keeps the pid the bench measures).
client_cpus=${ZS_TLS_SPLIT%/*}
server_cpus=${ZS_TLS_SPLIT#*/}
pins=$(mktemp -d)
trap 'rm -rf "$pins" ${certs_tmp:-}' EXIT
printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$client_cpus" "$(realpath "$b")" > "$pins/transport_bench"
printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$server_cpus" "$(realpath "$s")" > "$pins/zerostate-server"
chmod +x "$pins/transport_bench" "$pins/zerostate-server"
cores="$(taskset -c "$client_cpus" nproc)+$(taskset -c "$server_cpus" nproc)"
echo "split: client on cpus $client_cpus, servers on $server_cpus ($cores)" | tee -a "$out/all.log"
b=$pins/transport_bench
run tls-tcp-split 300 --server_binary="$pins/zerostate-server" \
  --planes=tcp --servers=1,4 --reps=3 --tls_dir=$certs --json "$@"
python3 "$(dirname "$0")/tls_target.py" "$out/tls-tcp-split.log" "$out/aes.txt" "$cores" |
  tee "$out/target-split.txt"
