#!/usr/bin/env bash
# Prints a PrometheusRule (Prometheus operator) holding the groups of
# deploy/prometheus/rules/*.yml, so the operator's Prometheus loads the same
# recording and alert rules that promtool checks:
#   deploy/k8s/components/monitoring/prometheusrule.sh | kubectl apply -n NS -f -
set -euo pipefail
rules=$(cd "$(dirname "$0")/../../../prometheus/rules" && pwd)
cat <<'HEAD'
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: zerostate
  labels:
    app.kubernetes.io/part-of: zerostate
spec:
  groups:
HEAD
# Each file is "groups:" then a list: keep the list, indented under spec.
for f in "$rules"/*.yml; do
  sed -e '/^#/d' -e '/^groups:/d' -e 's/^/  /' "$f"
done
