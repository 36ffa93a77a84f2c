"""The real `gpu-webhook serve` with a node inventory watched from a loopback API server: the cluster checks'
verdicts over HTTPS, drift in /readyz and the metrics, and the skip once the watch has been broken too long."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import waiting
from tests.conftest import LiveServer
from tests.fake_kube_api import loopback_cluster
from tests.test_clustercheck import A100, node
from tests.test_server import pod, review

POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: training}
spec:
  namespaces: [train]
  limits: {maxPerContainer: 16, maxPerPod: 16}
  cluster: {fits: deny}
---
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: shared}
spec:
  namespaces: [notebooks]
  sharing: {mode: time-slicing, replicas: 4}
"""
SLICED = {**A100, "nvidia.com/gpu.replicas": "8", "nvidia.com/gpu.sharing-strategy": "time-slicing"}


@pytest.fixture
def cluster_server(start_server: Callable[..., LiveServer], tmp_path: Path):
    nodes = [node("gpu-a", {"nvidia.com/gpu": "8"}, A100), node("ts-a", {"nvidia.com/gpu.shared": "32"}, SLICED)]
    with loopback_cluster(tmp_path, nodes=nodes, policies={"p.yaml": POLICY}) as cluster:
        arguments = ["--kubeconfig", cluster.kubeconfig, "--cluster-stale-after", "1"]
        server = start_server(cluster.policies, extra_args=arguments)
        yield server, cluster.api


eventually = functools.partial(waiting.eventually, timeout=10.0)  # a server's node watch: more time


def cluster_of(server: LiveServer) -> dict:
    return server.get("/readyz").json().get("cluster", {})


def test_a_pod_no_node_can_hold_is_denied_and_one_that_fits_is_allowed(cluster_server):
    server, api = cluster_server
    eventually(lambda: cluster_of(server).get("inventory") == "current")
    assert review(server, "validate", pod("train", "8"))["allowed"] is True
    denied = review(server, "validate", pod("train", "9"))
    assert denied["status"]["message"] == (
        'container "main": nvidia.com/gpu "9" fits on no node: the most one node holds is 8 (node "gpu-a"); '
        'request at most 8, or list a larger node pool in cluster.assumeNodes (policy "training", cluster.fits)'
    )
    api.put_node(node("gpu-big", {"nvidia.com/gpu": "16"}, A100))  # a bigger node joins: the watch tells
    eventually(lambda: review(server, "validate", pod("train", "9"))["allowed"] is True)


def test_drift_is_in_readyz_and_the_metrics(cluster_server):
    server, _ = cluster_server
    eventually(lambda: cluster_of(server).get("inventory") == "current")
    details = cluster_of(server)
    assert details["credentials"].startswith("kubeconfig ")
    assert details["nodes"] == 2
    assert details["drift"] == [
        'policy "shared" sharing.replicas is 4, but 1 node (ts-a) says 8: each pod is told it has 1/4 of a GPU, '
        "but the GPU is shared 8 ways; set sharing.replicas: 8 (or auto), or change the device plugin's sharing "
        "config"
    ]
    key = 'gpu_admission_policy_drift_nodes{field="sharing.replicas",policy="shared"}'
    eventually(lambda: server.metrics().get(key) == 1.0)
    assert server.metrics()["gpu_admission_inventory_nodes"] == 2.0
    warned = review(server, "mutate", pod("notebooks", "1"))  # drift warns by default
    assert warned["allowed"] is True
    assert any("sharing.replicas 4 but 1 node says 8" in warning for warning in warned["warnings"])  # short form


def test_a_broken_watch_skips_the_checks_after_the_set_time_and_says_so(cluster_server):
    server, api = cluster_server
    eventually(lambda: cluster_of(server).get("inventory") == "current")
    assert review(server, "validate", pod("train", "9"))["allowed"] is False
    api.stop()
    eventually(lambda: cluster_of(server).get("inventory") == "stale")
    assert review(server, "validate", pod("train", "9"))["allowed"] is True  # never fails closed
    record = server.wait_for_log(lambda r: r.get("event") == "cluster-checks-skipped")
    assert record["message"].startswith("cluster checks skipped: the node watch has been broken for over 1 s (")
    assert server.metrics()['gpu_admission_cluster_checks_skipped_total{reason="stale"}'] >= 1


def test_without_credentials_the_checks_are_off_and_the_banner_says_so(start_server, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    server = start_server()
    assert "  cluster checks: off: not in a cluster, and neither --kubeconfig nor $KUBECONFIG is set" in server.log()
    assert "cluster" not in server.get("/readyz").json()


def test_a_correct_mixed_cluster_has_no_drift_and_a_relabelled_pool_drifts_on_its_policy(start_server, tmp_path):
    """The cluster of tests/gfd_cluster.py: /readyz, the drift gauge and the reviews' warnings."""
    from tests import gfd_cluster

    policies = {"cluster.yaml": gfd_cluster.POLICIES}
    with loopback_cluster(tmp_path, nodes=gfd_cluster.nodes(), policies=policies) as cluster:
        server = start_server(cluster.policies, extra_args=["--kubeconfig", cluster.kubeconfig])
        eventually(lambda: cluster_of(server).get("nodes") == 7)
        assert "drift" not in cluster_of(server)
        for namespace, gpus in [("training", "1"), ("elsewhere", "2"), ("notebooks", "1"), ("research", "0.5")]:
            answer = review(server, "mutate", pod(namespace, gpus))
            assert answer["allowed"] is True
            assert not any("drift" in w or "nodes say" in w for w in answer.get("warnings", [])), answer["warnings"]
        for item in gfd_cluster.nodes(gfd_cluster.TWO_REPLICAS, 16):
            cluster.api.put_node(item)
        eventually(lambda: "drift" in cluster_of(server))
        assert cluster_of(server)["drift"] == [
            'policy "notebooks" sharing.replicas is 4, but 2 nodes (a100-ts-0, a100-ts-1) say 2: each pod is told it '
            "has 1/4 of a GPU, but the GPU is shared 2 ways; set sharing.replicas: 2 (or auto), or change the device "
            "plugin's sharing config"
        ]
        key = 'gpu_admission_policy_drift_nodes{field="sharing.replicas",policy="notebooks"}'
        eventually(lambda: server.metrics().get(key) == 2.0)
        gauges = server.metrics().items()
        assert [k for k, v in gauges if k.startswith("gpu_admission_policy_drift_nodes") and v] == [key]
        whole = review(server, "mutate", pod("training", "1"))
        assert whole["warnings"] == [
            "gpu-admission: pod: node affinity added on nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.slices.gi"
        ]
        shared = review(server, "mutate", pod("notebooks", "1"))
        assert shared["warnings"][-1] == "gpu-admission: pod: policy sharing.replicas 4 but 2 nodes say 2; ask an admin"
