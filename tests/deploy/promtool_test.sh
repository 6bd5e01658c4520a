#!/usr/bin/env bash
# The example scrape config and the rules pass Prometheus' own checks
# (promtool check config / check rules), the alert unit tests in
# deploy/prometheus/tests pass (promtool test rules), and a broken rule
# file is refused with a message naming it. Exits 77 (skip) only when
# promtool is absent.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prom=$root/deploy/prometheus
promtool=$(command -v promtool || true)
if [[ -z $promtool ]]; then
  echo "SKIP: promtool not installed (Debian package prometheus)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$promtool" check config "$prom/prometheus.yml"
"$promtool" check rules "$prom"/rules/*.yml
"$promtool" test rules "$prom"/tests/*.yml

# The checks do fail: an expression with a syntax error is refused.
printf 'groups:\n- name: g\n  rules:\n  - record: broken:rule\n    expr: sum(rate(x[5m])\n' \
  >"$tmp/broken.yml"
if "$promtool" check rules "$tmp/broken.yml" >"$tmp/out" 2>&1; then
  echo "FAIL: promtool accepted a broken rule file"; exit 1
fi
grep -q 'broken:rule' "$tmp/out" || { echo "FAIL: message does not name the rule"; cat "$tmp/out"; exit 1; }
echo "PASS: config, rules and alert unit tests"
