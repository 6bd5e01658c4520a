"""Helpers shared by the deploy tests: where things are, the documented
metric names, and the metric names a PromQL expression uses.

Runs on Debian's /usr/bin/python3 with python3-yaml; nothing else.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
METRICS_DOC = os.path.join(ROOT, "docs", "metrics.md")
RULES_DIR = os.path.join(ROOT, "deploy", "prometheus", "rules")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "zerostate.json")
SKIP = 77  # ctest SKIP_RETURN_CODE

# Series Prometheus writes itself for every target; the rules may use them.
PROMETHEUS_BUILTINS = {"up"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
PROMQL_KEYWORDS = {"and", "or", "unless", "offset", "bool", "inf", "nan",
                   "group_left", "group_right", "by", "without", "on",
                   "ignoring", "atan2"}


def documented_metrics(path=METRICS_DOC):
    """Returns {name: type} for every row of the tables in docs/metrics.md."""
    metrics = {}
    row = re.compile(r"^\|\s*(zerostate_[a-z0-9_]+)\s*\|\s*(\w+)\s*\|")
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = row.match(line)
            if m:
                metrics[m.group(1)] = m.group(2)
    return metrics


def series_names(metrics):
    """The series names a scrape of `metrics` ({name: type}) yields."""
    names = set()
    for name, kind in metrics.items():
        names.add(name)
        if kind == "histogram":
            names.update(name + s for s in HISTOGRAM_SUFFIXES)
    return names


def promql_metric_names(expr):
    """Metric names used in a PromQL expression (Grafana variables allowed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
               " ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", s):
        if m.group(2) is None and m.group(1).lower() not in PROMQL_KEYWORDS:
            names.add(m.group(1))
    return names


def load_rules(rules_dir=RULES_DIR):
    """Returns [(file, rule dict)] for every rule of every file in rules_dir."""
    rules = []
    for name in sorted(os.listdir(rules_dir)):
        with open(os.path.join(rules_dir, name), encoding="utf-8") as f:
            doc = yaml.safe_load(f)
        for group in doc["groups"]:
            rules.extend((name, r) for r in group["rules"])
    return rules


def dashboard_queries(dashboard):
    """Returns [(where, PromQL)] for every panel target of a Grafana dashboard."""
    queries = []
    for panel in dashboard["panels"]:
        for panel_or_child in [panel] + panel.get("panels", []):
            for t in panel_or_child.get("targets", []):
                queries.append((panel_or_child["title"], t["expr"]))
    return queries


def template_metric_names(dashboard):
    """Metric names the dashboard's label_values() variables read."""
    names = set()
    for var in dashboard["templating"]["list"]:
        q = var.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        for m in re.finditer(r"label_values\(\s*([A-Za-z_:][\w:]*)", q):
            names.add(m.group(1))
    return names


def load_dashboard(path=DASHBOARD):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def promtool():
    """Path of promtool, or None."""
    return shutil.which("promtool") or (
        "/usr/bin/promtool" if os.path.exists("/usr/bin/promtool") else None)


def promtool_check_rules(rules_yaml_text):
    """Runs `promtool check rules` on the text; returns (exit code, output)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write(rules_yaml_text)
    try:
        p = subprocess.run([promtool(), "check", "rules", f.name],
                           capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr
    finally:
        os.unlink(f.name)
