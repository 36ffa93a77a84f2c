"""The Grafana dashboard that ships beside the monitoring overlay and in the chart, written from one table.

`make manifests` (python -m webhook.cli.webhooks) writes it twice from `dashboard()`:
- manifests/overlays/monitoring/grafana-dashboard.yaml: a ConfigMap holding the JSON, labelled
  `grafana_dashboard: "1"`, which Grafana's dashboard sidecar (the Grafana chart, kube-prometheus-stack) loads;
- charts/gpu-admission/files/grafana-dashboard.json: the same JSON, which the chart's
  templates/grafana-dashboard.yaml puts in the same ConfigMap (`monitoring.dashboard.enabled`).

Three rows: reviews by decision, review latency (the histogram's quantiles), and each namespace's GPU budget,
used against hard. The budget gauges carry the team's namespace as `namespace`, which is why the
ServiceMonitor sets `honorLabels: true` (without it Prometheus renames that label `exported_namespace`). Every
replica exports the same ledger's values, so the budget panels take the `max` across replicas, never the sum.
tests/test_dashboard.py holds every query's metric names to what the real server exports.
"""

from __future__ import annotations

import json
from typing import Any

UID = "gpu-admission"
TITLE = "GPU admission"
CONFIGMAP = "gpu-admission-grafana-dashboard"
DATA_KEY = "gpu-admission.json"
OVERLAY = "manifests/overlays/monitoring/grafana-dashboard.yaml"
CHART = "charts/gpu-admission/files/grafana-dashboard.json"
SIDECAR_LABEL = ("grafana_dashboard", "1")  # the Grafana chart's sidecar.dashboards.label and labelValue

REVIEWS = "gpu_admission_reviews_total"
DURATION_BUCKETS = "gpu_admission_review_duration_seconds_bucket"
BUDGET_USED = "gpu_admission_budget_used_gpus"
BUDGET_HARD = "gpu_admission_budget_hard_gpus"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NAMESPACES = 'namespace=~"$namespace"'
WIDTH = 24  # Grafana's grid


def _target(expr: str, legend: str, ref: str, *, instant: bool = False, table: bool = False) -> dict[str, Any]:
    """One PromQL query; `instant`: the latest value only (bar gauges, tables), `table`: as rows of labels."""
    target: dict[str, Any] = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}
    if instant or table:
        target.update(instant=True, range=False)
    if table:
        target["format"] = "table"
    return target


def _timeseries(
    title: str, description: str, targets: list[dict[str, Any]], unit: str, grid: tuple[int, int, int, int]
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]}},
        "targets": targets,
    }


def _row(title: str, y: int) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": WIDTH, "h": 1}}


def _reviews(y: int) -> list[dict[str, Any]]:
    return [
        _row("Reviews", y),
        _timeseries(
            "Reviews by decision",
            "AdmissionReviews answered per second, by decision: allow, deny, warn (admitted with a kubectl "
            "warning), audit (would be denied under enforce) and error (a 4xx or 5xx answer, which the API "
            "server treats as a failure).",
            [_target(f"sum by (decision) (rate({REVIEWS}[$__rate_interval]))", "{{decision}}", "A")],
            "reqps",
            (0, y + 1, 12, 8),
        ),
        _timeseries(
            "Reviews by webhook",
            "Reviews per second at /mutate and /validate, and the share of them denied.",
            [
                _target(f"sum by (webhook) (rate({REVIEWS}[$__rate_interval]))", "{{webhook}}", "A"),
                _target(
                    f'sum by (webhook) (rate({REVIEWS}{{decision="deny"}}[$__rate_interval]))',
                    "{{webhook}} denied",
                    "B",
                ),
            ],
            "reqps",
            (12, y + 1, 12, 8),
        ),
    ]


def _latency(y: int) -> list[dict[str, Any]]:
    quantiles = [
        _target(
            f"histogram_quantile({q}, sum by (le, webhook) (rate({DURATION_BUCKETS}[$__rate_interval])))",
            f"{{{{webhook}}}} p{label}",
            ref,
        )
        for q, label, ref in (("0.5", "50", "A"), ("0.9", "90", "B"), ("0.99", "99", "C"))
    ]
    return [
        _row("Latency", y),
        _timeseries(
            "Review latency",
            "From a request's arrival in the handler to its answer. The webhooks' timeoutSeconds is 5: the API "
            "server refuses the object when a review takes longer (the GPUAdmissionSlow alert fires at 1 s).",
            quantiles,
            "s",
            (0, y + 1, WIDTH, 8),
        ),
    ]


def _budgets(y: int) -> list[dict[str, Any]]:
    used = f"max by (namespace, quota) ({BUDGET_USED}{{{NAMESPACES}}})"
    hard = f"max by (namespace, quota) ({BUDGET_HARD}{{{NAMESPACES}}})"
    return [
        _row("GPU budgets", y),
        {
            "type": "bargauge",
            "title": "Budget use",
            "description": "Each namespace's GPU budget (its ResourceQuota on requests.nvidia.com/gpu or "
            "limits.nvidia.com/gpu) as the share used, in GPU-equivalents: a whole GPU 1, a time-slicing or MPS "
            "replica 1/replicas, a MIG slice or memory share its dominant fraction of a GPU (docs/budgets.md).",
            "datasource": DATASOURCE,
            "gridPos": {"x": 0, "y": y + 1, "w": 12, "h": 9},
            "fieldConfig": {
                "defaults": {
                    "unit": "percentunit",
                    "min": 0,
                    "max": 1,
                    "thresholds": {
                        "mode": "absolute",
                        "steps": [
                            {"color": "green", "value": None},
                            {"color": "orange", "value": 0.8},
                            {"color": "red", "value": 1},
                        ],
                    },
                },
                "overrides": [],
            },
            "options": {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True},
            "targets": [_target(f"{used} / {hard}", "{{namespace}}/{{quota}}", "A", instant=True)],
        },
        {
            "type": "table",
            "title": "Budgets",
            "description": "Used and hard GPU-equivalents per namespace and quota, as the webhook's ledger holds "
            "them. `gpu-webhook audit` lists the same use by route (extended resources, DeviceClasses, claims, "
            "claim templates).",
            "datasource": DATASOURCE,
            "gridPos": {"x": 12, "y": y + 1, "w": 12, "h": 9},
            "fieldConfig": {"defaults": {"unit": "none", "decimals": 3}, "overrides": []},
            "options": {"showHeader": True, "sortBy": [{"displayName": "namespace", "desc": False}]},
            "transformations": [
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {"Value #A": "used (GPUs)", "Value #B": "hard (GPUs)"},
                    },
                },
            ],
            "targets": [_target(used, "", "A", table=True), _target(hard, "", "B", table=True)],
        },
        _timeseries(
            "Budget use over time",
            "Used GPU-equivalents per namespace and quota, with each quota's hard as a dashed line.",
            [_target(used, "{{namespace}}/{{quota}} used", "A"), _target(hard, "{{namespace}}/{{quota}} hard", "B")],
            "none",
            (0, y + 10, WIDTH, 9),
        )
        | {
            "fieldConfig": {
                "defaults": {"unit": "none", "min": 0},
                "overrides": [
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
                    }
                ],
            }
        },
    ]


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON model (Grafana 10 and later)."""
    panels = [*_reviews(0), *_latency(9), *_budgets(18)]
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    return {
        "uid": UID,
        "title": TITLE,
        "description": "gpu-admission: reviews by decision, review latency, and each namespace's GPU budget.",
        "tags": ["gpu-admission", "gpu", "admission"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "graphTooltip": 1,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "namespace",
                    "label": "Namespace",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": {"query": f"label_values({BUDGET_HARD}, namespace)", "refId": "namespaces"},
                    "definition": f"label_values({BUDGET_HARD}, namespace)",
                    "includeAll": True,
                    "allValue": ".*",
                    "multi": True,
                    "current": {},
                    "refresh": 2,
                    "sort": 1,
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def _overlay_configmap(generated: str) -> str:
    body = "".join(f"    {line}\n" if line else "\n" for line in dashboard_json().splitlines())
    key, value = SIDECAR_LABEL
    return (
        f"{generated}\n"
        "# Grafana's dashboard sidecar (the Grafana chart, kube-prometheus-stack) loads every ConfigMap labelled\n"
        f'# {key}: "{value}"; one that searches only its own namespace needs this ConfigMap moved there.\n'
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        f"  name: {CONFIGMAP}\n"
        "  namespace: gpu-admission\n"
        "  labels:\n"
        "    app.kubernetes.io/name: gpu-admission\n"
        "    app.kubernetes.io/component: webhook\n"
        f'    {key}: "{value}"\n'
        "data:\n"
        f"  {DATA_KEY}: |\n"
        f"{body}"
    )


def files(generated: str) -> dict[str, str]:
    """The dashboard's files (path from the repository root -> content), under the `generated` header line."""
    return {OVERLAY: _overlay_configmap(generated), CHART: dashboard_json()}
