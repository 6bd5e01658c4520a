"""The Prometheus rules and the Grafana dashboard name only metrics that
docs/metrics.md lists, and the code exports every metric that it lists.

Usage: /usr/bin/python3 metric_names_test.py [TestClass ...]
"""
import copy
import os
import re
import sys
import unittest

import deploylib as lib

KNOWN_TYPES = {"counter", "gauge", "histogram", "summary"}


def recording_names():
    return {r["record"] for _, r in lib.load_rules() if "record" in r}


def undocumented(names, allowed):
    return sorted(n for n in names if n not in allowed)


def allowed_names():
    return (lib.series_names(lib.documented_metrics()) | recording_names()
            | lib.PROMETHEUS_BUILTINS)


def rule_problems(rules, allowed):
    """Returns 'file: rule: name' for every unknown metric name in rules."""
    problems = []
    for fname, rule in rules:
        title = rule.get("record") or rule.get("alert")
        for n in undocumented(lib.promql_metric_names(rule["expr"]), allowed):
            problems.append(f"{fname}: {title}: {n}")
    return problems


def dashboard_problems(dashboard, allowed):
    problems = []
    for title, expr in lib.dashboard_queries(dashboard):
        for n in undocumented(lib.promql_metric_names(expr), allowed):
            problems.append(f"panel '{title}': {n}")
    for n in undocumented(lib.template_metric_names(dashboard), allowed):
        problems.append(f"templating: {n}")
    return problems


class DocTest(unittest.TestCase):
    def test_lists_metrics_with_known_types(self):
        metrics = lib.documented_metrics()
        self.assertGreaterEqual(len(metrics), 20, "docs/metrics.md table not parsed")
        for name, kind in metrics.items():
            self.assertIn(kind, KNOWN_TYPES, f"{name} has unknown type {kind}")


class ExtractorTest(unittest.TestCase):
    def test_finds_names_and_skips_functions_labels_and_variables(self):
        expr = ('sum by (phase) (rate(a_total{job="x", m=~"b.*"}[$__rate_interval]))'
                ' / ignoring (phase) group_left sum(rate(c_total[5m] offset 1h))'
                ' and on (instance) d > bool 1e-6 * ${k} + e:rec:rate1m')
        self.assertEqual(lib.promql_metric_names(expr),
                         {"a_total", "c_total", "d", "e:rec:rate1m"})

    def test_histogram_series_names(self):
        names = lib.series_names({"h_seconds": "histogram", "c_total": "counter"})
        self.assertEqual(names, {"h_seconds", "h_seconds_bucket", "h_seconds_sum",
                                 "h_seconds_count", "c_total"})


class RulesTest(unittest.TestCase):
    def test_rules_use_only_documented_metrics(self):
        problems = rule_problems(lib.load_rules(), allowed_names())
        self.assertEqual(problems, [], "metrics not in docs/metrics.md")

    def test_an_unknown_metric_is_reported_by_name(self):
        rules = copy.deepcopy(lib.load_rules())
        rules[0][1]["expr"] += " + zerostate_made_up_total"
        problems = rule_problems(rules, allowed_names())
        self.assertEqual(len(problems), 1)
        self.assertIn("zerostate_made_up_total", problems[0])
        self.assertIn(rules[0][1].get("record") or rules[0][1]["alert"], problems[0])

    def test_every_alert_has_severity_summary_and_description(self):
        alerts = [r for _, r in lib.load_rules() if "alert" in r]
        self.assertGreaterEqual(len(alerts), 6)
        for a in alerts:
            self.assertIn(a["labels"].get("severity"), {"warning", "critical"}, a["alert"])
            self.assertTrue(a["annotations"].get("summary"), a["alert"])
            self.assertTrue(a["annotations"].get("description"), a["alert"])


class DashboardTest(unittest.TestCase):
    def setUp(self):
        self.dash = lib.load_dashboard()  # raises with the position on bad JSON

    def test_dashboard_uses_only_documented_metrics(self):
        self.assertEqual(dashboard_problems(self.dash, allowed_names()), [])

    def test_an_unknown_metric_in_a_panel_is_reported_by_name(self):
        dash = copy.deepcopy(self.dash)
        panel = next(p for p in dash["panels"] if p.get("targets"))
        panel["targets"][0]["expr"] = "rate(zerostate_bogus_total[5m])"
        problems = dashboard_problems(dash, allowed_names())
        self.assertEqual(problems, [f"panel '{panel['title']}': zerostate_bogus_total"])

    def test_job_variable_filters_every_job_scoped_query(self):
        names = [v["name"] for v in self.dash["templating"]["list"]]
        self.assertIn("job", names)
        for title, expr in lib.dashboard_queries(self.dash):
            self.assertIn('job_id="$job"', expr, f"panel '{title}' ignores $job")

    def test_shows_the_panels_operators_need(self):
        titles = {p["title"] for p in self.dash["panels"]}
        for t in ["Step rate", "Step time split", "Bytes in per server",
                  "Bytes out per server", "Optimizer throughput",
                  "Server RPC latency p99", "Errors by reason"]:
            self.assertIn(t, titles)

    def test_panel_ids_are_unique(self):
        ids = [p["id"] for p in self.dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))


def source_literals(folders=("server", "client", "worker")):
    literals = set()
    for folder in folders:
        for dirpath, _, files in os.walk(os.path.join(lib.ROOT, folder)):
            for f in files:
                if f.endswith((".cc", ".h", ".cu", ".cuh")):
                    with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                        literals.update(re.findall(r'"(zerostate_[a-z0-9_]+)"', fh.read()))
    return literals


class SourcesTest(unittest.TestCase):
    def test_code_exports_every_documented_metric(self):
        missing = sorted(set(lib.documented_metrics()) - source_literals())
        self.assertEqual(missing, [], "in docs/metrics.md but no string literal "
                         "in server/, client/ or worker/")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:])
