#!/usr/bin/env bash
# transport_bench under TLS against plaintext, in one run, on the device
# machine (the target: the TLS data plane at >= 0.6 of the plaintext
# data plane at 1 and 4 servers; CPU s/GB with kTLS and with OpenSSL's
# userspace records). Figures "...tcp.tls" use kTLS where the kernel
# offers it ("records" in the JSON says what was used), "...tcp.tls_user"
# force userspace records on both ends (only where the kernel has kTLS).
# Runs:
#   stream      stream_bench: the byte stream alone, plaintext and TLS, 1/4/8
#               connections (what the record layer costs per connection);
#   tls-tcp     the target: the TCP data plane, 4 streams per server (the
#               client's default), 1 and 4 servers;
#   tls-tcp-s8  the same with 8 streams per server (encryption spread over
#               twice the cores);
#   tls-grpc    gRPC under TLS (only with ZS_TLS_GRPC=1; unchanged by the
#               data plane's work).
#   aes         `openssl speed -evp aes-128-gcm` on one core (aes.txt): the
#               cipher's raw rate, the floor of the TLS CPU s/GB;
# target.txt: first, as --json figures, the AES-128-GCM GB/s per core and
# the crypto ceiling it implies for this host (cores * rate / 2: each byte
# sealed once and opened once, both ends on the same cores); then per
# figure, TLS / plaintext at 4 streams, at 8, TLS at 8 against plaintext
# at 4, and "ceiling": the ratio this host allows when TLS costs
# plaintext's CPU s/GB plus the two cipher passes (bench/transport/tls_target.py).
# Bundle first: ../shared/tools/device-bundle .device \
#   build/bench/transport/transport_bench build/bench/transport/stream_bench \
#   build/server/zerostate-server
# then, there: source .device/env.sh && bench/transport/device_tls.sh $OUT
# Extra arguments go to every transport_bench run, last (they win): e.g.
# a small check: device_tls.sh /tmp/out --tensor_mib=16 --servers=1 --reps=1
# (ZS_STREAM_MIB sets stream_bench's MiB per connection, default 1024.)
# Needs the openssl tool, or certificates made beforehand in .device/tls
# (ca.pem, server.pem/.key for 127.0.0.1, client.pem/.key).
set -u
out=$1
shift
mkdir -p "$out"
source "$(dirname "$0")/device_common.sh"
bin=${ZS_DEVICE_BIN:-.device/bin}
b=$bin/transport_bench
s=$bin/zerostate-server
certs=.device/tls
if [ ! -f "$certs/client.pem" ]; then
  # Throwaway certificates, outside $out: the run's keys are not results.
  certs=$(mktemp -d)
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
{ modprobe tls 2>&1; echo "tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp)";
  grep -w '^tls' /proc/modules; } > "$out/ktls.txt" 2>&1
cat "$out/ktls.txt"
# The cipher alone, one core: 16 KiB blocks (one TLS record).
echo "== aes: openssl speed -evp aes-128-gcm" | tee -a "$out/all.log"
openssl speed -elapsed -seconds 3 -evp aes-128-gcm -bytes 16384 > "$out/aes.txt" 2>&1
grep -i 'aes-128-gcm' "$out/aes.txt" | tail -1 | tee -a "$out/all.log"
# The byte stream alone: plaintext against TLS per connection.
echo "== stream: stream_bench" | tee -a "$out/all.log"
timeout 120 "$bin/stream_bench" --connections=1,4,8 --mib="${ZS_STREAM_MIB:-1024}" --reps=2 \
  --json 2>&1 | tee "$out/stream.log" >> "$out/all.log"
# The data plane, plaintext / TLS, mutual TLS, 1 and 4 servers; 4 streams
# per server (the default), then 8.
# --userspace_tls_streams=0 keeps TLS at 4 here; under userspace TLS a
# default client runs 8 per server, but no more over all servers than the
# host's cores (client/data_streams.h): the column "TLS default / plain@4"
# (and the --json figures tls_default.*) is what it gets.
run tls-tcp 300 --server_binary=$s --planes=tcp --servers=1,4 --reps=2 --tls_dir=$certs \
  --userspace_tls_streams=0 --json "$@"
run tls-tcp-s8 300 --server_binary=$s --planes=tcp --servers=1,4 --reps=2 --streams=8 \
  --tls_dir=$certs --json "$@"
# gRPC under TLS against plaintext, for the table (smaller tensor).
if [ "${ZS_TLS_GRPC:-0}" = 1 ]; then
  run tls-grpc 150 --server_binary=$s --planes=grpc --servers=1,4 --reps=1 --tensor_mib=64 \
    --tls_dir=$certs --json "$@"
fi
# The target: TLS data plane over plaintext data plane, fp32 and bf16.
python3 "$(dirname "$0")/tls_target.py" "$out/tls-tcp.log" "$out/tls-tcp-s8.log" "$out/aes.txt" \
  "$(nproc)" |
  tee "$out/target.txt"
