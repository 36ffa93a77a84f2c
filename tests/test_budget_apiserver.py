"""GPU budgets through a real kube-apiserver (v1.36) and the shipped webhook configurations.

Each namespace carries the ResourceQuota every GPU cluster has, `requests.nvidia.com/gpu: "1"`, and a policy
that turns `nvidia.com/gpu` into something the API server's own quota does not count: time-slicing replicas
(`nvidia.com/gpu.shared`), a MIG slice (`nvidia.com/mig-3g.40gb`), ACK GPU memory (`aliyun.com/gpu-mem`). The
real server (`gpu-webhook serve`, 2 workers) watches the API server, keeps its ledger there, and refuses the
pod that would pass one GPU-equivalent, in each mode, also when 16 creates race; a deleted pod's share comes
back. No controller manager runs: the quotas' status is written here as the quota controller would, and
unscheduled pods are deleted at once. Skips, saying what is missing, without $KUBEBUILDER_ASSETS or kubectl.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests import envtest
from tests.conftest import LiveServer
from tests.envtest import ControlPlane
from webhook.server.ledger import Record

ONLY = "gpu-admission.io/test-budgets"  # only namespaces with it are sent to this module's webhooks
LEDGER = "gpu-admission-budgets"  # the webhook's own namespace here: its ledger records live there
POLICIES = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: budget-time-slicing}
spec:
  namespaces: [budget-ts, budget-race, budget-delete, budget-dry]
  sharing: {mode: time-slicing, replicas: 4}
  cluster: {fits: "off", offered: "off", drift: "off"}
---
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: budget-mig}
spec:
  namespaces: [budget-mig]
  sharing: {mode: mig, migProfile: 1g.10gb, migProfiles: [1g.10gb, 2g.20gb, 3g.40gb]}
  gpu: {model: A100-80GB}
  fractional: mig
  cluster: {fits: "off", offered: "off", drift: "off"}
---
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: budget-ack}
spec:
  namespaces: [budget-ack]
  sharing: {mode: memory, backend: ack}
  gpu: {memoryMiB: 24576}
  cluster: {fits: "off", offered: "off", drift: "off"}
"""
NAMESPACES = ("budget-ts", "budget-race", "budget-delete", "budget-dry", "budget-mig", "budget-ack")


@pytest.fixture(scope="module")
def plane(
    kube_apiserver: ControlPlane,
    kubectl: Path,
    start_server: Callable[..., LiveServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControlPlane]:
    for namespace in (LEDGER, *NAMESPACES):
        labels = {ONLY: "y"} if namespace != LEDGER else {}
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
        assert kube_apiserver.request("POST", "/api/v1/namespaces", body).status_code in (201, 409)
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": namespace},
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts"  # no controller manager makes it here
        assert kube_apiserver.request("POST", path, account).status_code in (201, 409)
    for namespace in NAMESPACES:
        _quota(kube_apiserver, namespace)
    policies = tmp_path_factory.mktemp("budget-policies")
    (policies / "budgets.yaml").write_text(POLICIES)
    arguments = ["--kubeconfig", str(kube_apiserver.kubeconfig), "--budget-namespace", LEDGER, "--budget-grace", "5"]
    server = start_server(policies, workers=2, extra_args=arguments)
    _wait(lambda: _budgets_current(server), "the server's budget watches list")
    configs = envtest.shipped_webhook_configurations(
        kubectl, server.url, server.cert.ca_cert.read_bytes(), "budgets", ONLY
    )
    for config in configs:
        plural = config["kind"].lower() + "s"
        response = kube_apiserver.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", config)
        assert response.status_code == 201, response.text
    yield kube_apiserver
    for config in configs:
        plural = config["kind"].lower() + "s"
        kube_apiserver.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}")


def _quota(plane: ControlPlane, namespace: str) -> None:
    """`requests.nvidia.com/gpu: "1"`, with the status the quota controller would write (none runs here)."""
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}  # fmt: skip
    response = plane.request("POST", f"/api/v1/namespaces/{namespace}/resourcequotas", body)
    assert response.status_code in (201, 409), response.text
    stored = plane.request("GET", f"/api/v1/namespaces/{namespace}/resourcequotas/gpus").json()
    stored["status"] = {"hard": {"requests.nvidia.com/gpu": "1"}, "used": {"requests.nvidia.com/gpu": "0"}}
    status = plane.request("PUT", f"/api/v1/namespaces/{namespace}/resourcequotas/gpus/status", stored)
    assert status.status_code == 200, status.text


def _budgets_current(server: LiveServer) -> bool:
    found = server.get("/readyz").json().get("cluster", {}).get("budgets", {})
    return all(found.get(part, {}).get("state") == "current" for part in ("resourceQuotas", "ledger"))


def _wait(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def _pod(namespace: str, name: str, gpus: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container]}}  # fmt: skip


def _create(plane: ControlPlane, namespace: str, name: str, gpus: str) -> Any:
    return plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod(namespace, name, gpus))


def _refusal(response: Any) -> str:
    assert response.status_code == 403, response.text
    return str(json.loads(response.text)["message"])


def _ledger(plane: ControlPlane, namespace: str) -> Record:
    """The namespace's record: the recount's sums and the reservations in flight."""
    response = plane.request("GET", f"/api/v1/namespaces/{LEDGER}/configmaps/gpu-budget-{namespace}")
    found = Record.of(response.json()) if response.status_code == 200 else None
    return found if found is not None else Record(namespace, "")


def _counted(plane: ControlPlane, namespace: str) -> int:
    """The pods the namespace's record counts, once folded into the recount (no reservation left in flight)."""
    return _wait(lambda: (lambda r: not r.entries and r.pods())(_ledger(plane, namespace)), "the recount", 10.0)


@pytest.mark.parametrize(
    ("namespace", "gpus", "fit", "asks"),
    [
        ("budget-ts", "1", 4, "0.25 (1 replica of 4)"),  # nvidia.com/gpu.shared: 1, a quarter of a GPU
        ("budget-mig", "0.5", 2, "0.5 (one 3g.40gb MIG slice)"),  # half of an A100-80GB's memory
        ("budget-ack", "250m", 4, "0.25 (6 GiB of GPU memory)"),  # aliyun.com/gpu-mem: 6 of an A10's 24
    ],
)
def test_each_mode_is_refused_at_exactly_the_budget(plane: ControlPlane, namespace: str, gpus: str, fit: int, asks):
    for index in range(fit):
        response = _create(plane, namespace, f"fits-{index}", gpus)
        assert response.status_code == 201, response.text
    message = _refusal(_create(plane, namespace, "over", gpus))
    assert (
        f'pod "over": quota "gpus" of namespace "{namespace}": 1 of 1 GPU used; this pod asks {asks}; nothing fits; '
        "free some by ending pods of the namespace, or raise the quota's requests.nvidia.com/gpu"
    ) in message
    assert _counted(plane, namespace) == fit


def test_sixteen_concurrent_creates_admit_exactly_four(plane: ControlPlane):
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda index: _create(plane, "budget-race", f"race-{index}", "1"), range(16)))
    assert sorted(response.status_code for response in responses) == [201] * 4 + [403] * 12
    for response in responses:
        if response.status_code == 403:
            assert 'quota "gpus" of namespace "budget-race": 1 of 1 GPU used; this pod asks 0.25' in _refusal(response)
    assert _counted(plane, "budget-race") == 4


def test_a_deleted_pods_share_is_given_back(plane: ControlPlane):
    for index in range(4):
        assert _create(plane, "budget-delete", f"held-{index}", "1").status_code == 201
    assert _create(plane, "budget-delete", "fifth", "1").status_code == 403
    deleted = plane.request("DELETE", "/api/v1/namespaces/budget-delete/pods/held-0")
    assert deleted.status_code == 200, deleted.text  # not scheduled: deleted at once
    started = time.monotonic()
    _wait(lambda: _create(plane, "budget-delete", "fifth", "1").status_code == 201, "the share given back", 10.0)
    assert time.monotonic() - started < 10.0
    assert _counted(plane, "budget-delete") == 4


def test_a_dry_run_create_is_judged_and_writes_nothing(plane: ControlPlane):
    path = "/api/v1/namespaces/budget-dry/pods?dryRun=All"
    for index in range(6):  # more than fit: each judged on the ledger as it is, none counted
        response = plane.request("POST", path, _pod("budget-dry", f"dry-{index}", "1"))
        assert response.status_code == 201, response.text
    assert _ledger(plane, "budget-dry").pods() == 0
    for index in range(4):
        assert _create(plane, "budget-dry", f"real-{index}", "1").status_code == 201
    response = plane.request("POST", path, _pod("budget-dry", "dry-over", "1"))
    assert 'quota "gpus" of namespace "budget-dry": 1 of 1 GPU used' in _refusal(response)
    assert _counted(plane, "budget-dry") == 4
