# Sourced by the demo scripts (scripts/demo.sh, scripts/demo_mlp.sh): a
# scratch folder $tmp, every started process in $pids stopped on exit (also
# on Ctrl-C or an error), a free loopback port, and a state server started
# and waited for. Needs $server_bin set before start_server is called.
tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A TCP port nothing listens on at loopback (probed from a random start).
free_port() {
  local port=$((20000 + RANDOM % 30000))
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
  echo "$port"
}

# Starts server $1; waits for its "listening on HOST:PORT metrics on ADDR"
# line. Plaintext: everything stays on loopback (docs/operations.md,
# Security). Further arguments: the server's extra flags (demo-kill:
# --listen on a fixed port, which a server advertises in etcd).
start_server() {
  local i=$1 log=$tmp/server$1.log
  shift
  "$server_bin" --listen=127.0.0.1:0 --plaintext --metrics_listen=127.0.0.1:0 --threads=1 \
    --ram_budget_bytes=$((256 << 20)) "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    if grep -q "listening on" "$log"; then return 0; fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo: server $i did not start:" >&2; cat "$log" >&2; exit 1
}

# The servers' addresses (host:port,host:port) from logs $tmp/server$i.log.
server_addresses() {
  local i
  for i in "$@"; do sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$tmp/server$i.log"; done | paste -sd, -
}

# Prints where server $i's metrics are.
print_metrics() {
  local i
  for i in "$@"; do
    echo "demo: server $i metrics at http://$(sed -n 's/.*metrics on \([^ ]*\).*/\1/p' "$tmp/server$i.log")/metrics"
  done
}
