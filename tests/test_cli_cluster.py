"""The CLI against a cluster's nodes (tests/fake_kube_api.py): `check --cluster`, `policy lint --cluster` and
`audit` print the cluster checks' lines and the policy drift as a table a person can act on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_kube_api import FakeKubeAPI
from tests.test_cli_audit import gpu_webhook
from tests.test_clustercheck import A100, node
from tests.test_server_cluster import POLICY, SLICED

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "big", "namespace": "train"},
    "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "12"}}}]},
}


@pytest.fixture
def setup(tmp_path: Path):
    api = FakeKubeAPI().start()
    api.put_node(node("gpu-a", {"nvidia.com/gpu": "8"}, A100))
    for name in ("ts-a", "ts-b", "ts-c", "ts-d"):
        api.put_node(node(name, {"nvidia.com/gpu.shared": "32"}, SLICED))
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY)
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(POD))
    yield api, str(api.write_kubeconfig(tmp_path / "kubeconfig")), str(policies), str(manifest)
    api.stop()


DRIFT_TABLE = [
    "POLICY  FIELD             POLICY SAYS  NODES SAY  NODES                            FIX",
    "shared  sharing.replicas  4            8          4 nodes (ts-a, ts-b, ts-c, ...)  set sharing.replicas: 8 (or "
    "auto), or change the device plugin's sharing config",
    "policy drift: 1 disagreement in 1 policy (5 nodes read); until fixed, memory fractions and MIG conversions are "
    "wrong for the pods on those nodes",
]


def test_check_is_offline_by_default_and_runs_the_cluster_checks_with_cluster(setup):
    api, kubeconfig, policies, manifest = setup
    offline = gpu_webhook("check", "--policies", policies, manifest)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert api.list_requests("nodes") == []
    online = gpu_webhook("check", "--cluster", "--kubeconfig", kubeconfig, "--policies", policies, manifest)
    assert online.returncode == 1
    assert (
        'container "main": nvidia.com/gpu "12" fits on no node: the most one node holds is 8 (node "gpu-a"); '
        'request at most 8, or list a larger node pool in cluster.assumeNodes (policy "training", cluster.fits)'
    ) in online.stdout
    misuse = gpu_webhook("check", "--kubeconfig", kubeconfig, "--policies", policies, manifest)
    assert (misuse.returncode, misuse.stderr) == (
        2,
        "gpu-webhook check: --kubeconfig and --context only apply with --cluster\n",
    )


def test_policy_lint_cluster_prints_the_drift_table_and_exits_1(setup):
    _, kubeconfig, policies, _ = setup
    run = gpu_webhook("policy", "lint", policies, "--cluster", "--kubeconfig", kubeconfig)
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines()[-3:] == DRIFT_TABLE


def test_policy_lint_cluster_without_drift_says_so(setup, tmp_path):
    _, kubeconfig, _, _ = setup
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "p.yaml").write_text(POLICY.replace("replicas: 4", "replicas: 8"))
    run = gpu_webhook("policy", "lint", str(clean), "--cluster", "--kubeconfig", kubeconfig)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "no policy drift: every policy agrees with the GPU labels of 5 nodes"


def test_audit_prints_the_drift_under_its_report(setup):
    _, kubeconfig, policies, _ = setup
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", policies)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-3:] == DRIFT_TABLE
