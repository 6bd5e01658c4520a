"""Every query of the Grafana dashboard is valid PromQL, as Prometheus'
own parser (promtool check rules) reads it once Grafana's variables are
filled in. Exits 77 (skip) when promtool is absent.
"""
import sys
import unittest

import yaml

import deploylib as lib

GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$job": "demo"}


def as_rules(queries):
    """A rules file with one recording rule per (title, expr) query."""
    rules = []
    for i, (_, expr) in enumerate(queries):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    return yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})


class DashboardPromqlTest(unittest.TestCase):
    def test_every_query_parses(self):
        queries = lib.dashboard_queries(lib.load_dashboard())
        self.assertGreater(len(queries), 10)
        code, out = lib.promtool_check_rules(as_rules(queries))
        self.assertEqual(code, 0, out)

    def test_a_broken_query_is_reported(self):
        code, out = lib.promtool_check_rules(as_rules([("p", "sum(rate(x[1m])")]))
        self.assertNotEqual(code, 0)
        self.assertIn("dashboard:query_0", out)


if __name__ == "__main__":
    if lib.promtool() is None:
        print("SKIP: promtool not installed (Debian package prometheus)")
        sys.exit(lib.SKIP)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:])
