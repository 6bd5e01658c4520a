#!/usr/bin/env bash
# deploy/systemd: the server unit passes `systemd-analyze verify` with no
# warning, every ${VAR} it uses is set in server.env, and the command line
# it builds from server.env starts the real zerostate-server (on loopback,
# ephemeral ports), which then stops cleanly on SIGTERM.
#   systemd_test.sh PATH/TO/zerostate-server
# Exits 77 (skip) only when systemd-analyze or the server binary is absent.
set -uo pipefail
server=${1:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
unit=$root/deploy/systemd/zerostate-server.service
envfile=$root/deploy/systemd/server.env
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze absent"; exit 77; }
[[ -x $server ]] || { echo "SKIP: no zerostate-server binary at '$server'"; exit 77; }
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. systemd's own parser, with ExecStart pointing at the built binary.
sed "s|/usr/local/bin/zerostate-server|$server|" "$unit" >"$tmp/zerostate-server.service"
systemd-analyze verify "$tmp/zerostate-server.service" >"$tmp/verify" 2>&1 || { cat "$tmp/verify"; fail "verify failed"; }
[[ ! -s $tmp/verify ]] || { cat "$tmp/verify"; fail "verify printed warnings"; }

# 2. The unit's variables are all in the env file.
for var in $(grep -o '\${[A-Z_]*}' "$unit" | tr -d '${}' | sort -u); do
  grep -q "^$var=" "$envfile" || fail "\${$var} used by the unit is not set in server.env"
done

# 3. The ExecStart command line, expanded from server.env, runs the server,
# with a throwaway CA and server certificate in place of /etc/zerostate/tls.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout "$tmp/ca.key" \
  -out "$tmp/ca.pem" >/dev/null 2>&1 || fail "openssl: cannot make a CA"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout "$tmp/server.key" \
  -out "$tmp/server.pem" >/dev/null 2>&1 || fail "openssl: cannot make a certificate"
exec_line=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$unit" | sed 's/^ExecStart=//; s/\\$//' | tr '\n' ' ')
args=$(set -a; source "$envfile"; ZEROSTATE_LISTEN=127.0.0.1:0 ZEROSTATE_METRICS_LISTEN=127.0.0.1:0 ZEROSTATE_DATA_LISTEN=127.0.0.1:0 \
  ZEROSTATE_THREADS=1 ZEROSTATE_NVME_DIR=$tmp ZEROSTATE_TLS_CERT=$tmp/server.pem \
  ZEROSTATE_TLS_KEY=$tmp/server.key ZEROSTATE_TLS_CLIENT_CA=$tmp/ca.pem; eval "echo $exec_line")
read -r -a argv <<<"$args"
echo "runs: ${argv[*]}"
"$server" "${argv[@]:1}" >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 300); do
  grep -q "listening on" "$tmp/out" && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/out"; fail "the server exited at start"; }
  sleep 0.1
done
grep -q "zerostate-server listening on 127.0.0.1:" "$tmp/out" || { cat "$tmp/out"; fail "no listening line"; }
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
((rc == 0)) || { cat "$tmp/out"; fail "exit status $rc after SIGTERM"; }
echo "PASS: unit verified, env complete, server started and stopped"
