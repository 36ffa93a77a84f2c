"""The Grafana dashboard (webhook/cli/dashboard.py, written by `make manifests`): its panels show reviews by
decision, latency and each namespace's budget, and every metric its PromQL names is one the real server
exports, read from a running `gpu-webhook serve`'s /metrics endpoint."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import LiveServer
from tests.fake_kube_api import loopback_cluster
from tests.test_budget_server import LEDGER_NAMESPACE, budgets_current, create, eventually, gpu_pod, quota
from webhook.cli import dashboard

ROOT = Path(__file__).resolve().parent.parent

# PromQL's words that are not series names: aggregations, functions (followed by "(") are told apart by that.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (Grafana's variables and label_values() included)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)  # Grafana's variables ($__rate_interval, ${datasource})
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
    expr = re.sub(r"\blabel_values\(\s*([^,)]+)[^)]*\)", r"\1", expr)  # Grafana's: the series, not the label
    names = set()
    for match in _IDENTIFIER.finditer(expr):
        rest = expr[match.end() :].lstrip()
        word = match.group()
        if rest.startswith("(") or word in KEYWORDS or expr[match.start() - 1 : match.start()].isdigit():
            continue  # a function or aggregation, a keyword, or a number's exponent or unit
        names.add(word)
    return names


def queries(model: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            yield f'panel "{panel["title"]}" {target["refId"]}', target["expr"]
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            yield f'variable "{variable["name"]}"', variable["query"]["query"]


def used_names() -> set[str]:
    return {name for _, expr in queries(dashboard.dashboard()) for name in metric_names(expr)}


def test_the_extraction_finds_series_and_nothing_else() -> None:
    assert metric_names('sum by (le, webhook) (rate(a_bucket{x="y"}[5m])) / on(job) b_total') == {"a_bucket", "b_total"}
    assert metric_names('histogram_quantile(0.99, c{namespace=~"$namespace"}) > 1e3') == {"c"}
    assert metric_names("label_values(d_gpus, namespace)") == {"d_gpus"}
    assert metric_names("max without (instance) (e) or vector(0)") == {"e"}


def test_the_shipped_configmap_and_the_charts_file_hold_the_dashboard() -> None:
    (configmap,) = yaml.safe_load_all((ROOT / dashboard.OVERLAY).read_text())
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"][dashboard.DATA_KEY]) == dashboard.dashboard()
    assert json.loads((ROOT / dashboard.CHART).read_text()) == dashboard.dashboard()


def test_the_panels_show_reviews_by_decision_latency_and_each_namespaces_budget() -> None:
    model = dashboard.dashboard()
    panels = {panel["title"]: panel for panel in model["panels"] if panel["type"] != "row"}
    assert [p["id"] for p in model["panels"]] == list(range(1, len(model["panels"]) + 1))
    by_decision = panels["Reviews by decision"]["targets"][0]
    assert "sum by (decision)" in by_decision["expr"] and by_decision["legendFormat"] == "{{decision}}"
    latency = [t["expr"] for t in panels["Review latency"]["targets"]]
    assert all(e.startswith("histogram_quantile(") and dashboard.DURATION_BUCKETS in e for e in latency)
    assert [e.split(",")[0].split("(")[1] for e in latency] == ["0.5", "0.9", "0.99"]
    budget = {t["refId"]: t["expr"] for t in panels["Budgets"]["targets"]}
    assert dashboard.BUDGET_USED in budget["A"] and dashboard.BUDGET_HARD in budget["B"]
    # Every replica exports the same ledger: summing across them would count each namespace once per replica.
    budget_queries = [e for _, e in queries(model) if "budget" in e and not e.startswith("label_values")]
    assert budget_queries and all("sum" not in e and "max by (namespace, quota)" in e for e in budget_queries)
    assert all('namespace=~"$namespace"' in e for e in budget_queries)
    # No panel overlaps another on Grafana's 24-column grid.
    cells: set[tuple[int, int]] = set()
    for panel in model["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, f'panel "{panel["title"]}" overlaps another'
        cells |= mine


POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: shared}
spec:
  namespaces: [team-a]
  sharing: {mode: time-slicing, replicas: 4}
"""


@pytest.fixture(scope="module")
def scraped(start_server: Callable[..., LiveServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """The series names a real server exports once it has answered a review at each webhook and holds a
    budget: counters, histograms and the budget gauges appear once they have a value."""
    with loopback_cluster(
        tmp_path_factory.mktemp("dashboard"), objects=[quota("team-a")], policies={"p.yaml": POLICY}
    ) as cluster:
        arguments = ["--kubeconfig", cluster.kubeconfig, "--budget-namespace", LEDGER_NAMESPACE]
        server = start_server(cluster.policies, extra_args=arguments)
        eventually(lambda: budgets_current(server))
        assert create(server, cluster.api, gpu_pod("team-a", "notebook"))["allowed"]
        eventually(lambda: any(name.startswith(dashboard.BUDGET_USED) for name in server.metrics()))
        text = requests.get(server.metrics_url, timeout=10).text
        server.stop()  # what it exports is read: it need not outlive its API server idle
        yield {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_every_query_names_a_series_the_server_exports(scraped: set[str]) -> None:
    used = used_names()
    assert used == {dashboard.REVIEWS, dashboard.DURATION_BUCKETS, dashboard.BUDGET_USED, dashboard.BUDGET_HARD}
    missing = sorted(used - scraped)
    assert not missing, f"the dashboard queries series the server does not export: {missing}"
