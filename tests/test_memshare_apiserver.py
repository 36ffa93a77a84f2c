"""Memory-sliced sharing through a real kube-apiserver (v1.36) with the shipped webhook configurations: their
match conditions send a pod that names only a backend's resources, and what the API server stores is each
backend's share, placement and steering. Skipped without KUBEBUILDER_ASSETS (tests/envtest.py) or kubectl.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import envtest
from tests.conftest import ROOT, LiveServer
from tests.envtest import ControlPlane

EXAMPLES = ROOT / "examples" / "policies"
TEST_LABEL = "gpu-admission.io/test-memshare"  # only namespaces with it are sent to this module's webhooks


@pytest.fixture(scope="module")
def plane(
    kube_apiserver: ControlPlane,
    kubectl: Path,
    start_server: Callable[..., LiveServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControlPlane]:
    policies = tmp_path_factory.mktemp("memory-policies")
    for name in ("memory-ack.yaml", "memory-hami.yaml", "memory-volcano.yaml"):
        shutil.copy(EXAMPLES / name, policies / name)
    server = start_server(policies)
    configs = envtest.shipped_webhook_configurations(
        kubectl, server.url, server.cert.ca_cert.read_bytes(), "memshare", TEST_LABEL
    )
    for config in configs:
        plural = config["kind"].lower() + "s"
        response = kube_apiserver.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", config)
        assert response.status_code == 201, response.text
    for namespace in ("ack-apiserver", "hami-apiserver", "vgpu-apiserver"):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {TEST_LABEL: "y"}}}
        assert kube_apiserver.request("POST", "/api/v1/namespaces", body).status_code in (201, 409)
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": namespace}}  # fmt: skip
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts"  # no controller manager makes it here
        assert kube_apiserver.request("POST", path, account).status_code in (201, 409)
    yield kube_apiserver
    for config in configs:
        plural = config["kind"].lower() + "s"
        kube_apiserver.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}")


def _pod(namespace: str, name: str, limits: dict[str, str]) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example/infer:1", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container]}}  # fmt: skip


def _create(plane: ControlPlane, pod: dict[str, Any]):
    return plane.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)


@pytest.mark.parametrize(
    ("namespace", "limits"),
    [
        ("ack-apiserver", {"aliyun.com/gpu-mem": "6"}),  # 0.25 x 24 GiB
        ("hami-apiserver", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "25"}),
        ("vgpu-apiserver", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2038",
                            "volcano.sh/vgpu-cores": "25"}),  # in units of 10 MiB, the example's gpuMemoryFactor
    ],
)  # fmt: skip
def test_a_quarter_gpu_is_stored_as_the_backends_share(plane: ControlPlane, namespace: str, limits) -> None:
    response = _create(plane, _pod(namespace, "quarter", {"nvidia.com/gpu": "250m"}))
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["spec"]["containers"][0]["resources"] == {"limits": limits, "requests": limits}
    annotations = stored["metadata"]["annotations"]
    if namespace == "hami-apiserver":
        assert annotations["hami.io/node-scheduler-policy"] == annotations["hami.io/gpu-scheduler-policy"] == "binpack"
    if namespace == "ack-apiserver":
        required = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": "ack.node.gpu.schedule", "operator": "In", "values": ["cgpu", "core_mem", "mps"]},
            {"key": "ack.node.gpu.placement", "operator": "In", "values": ["spread"]},
        ]


def test_a_pod_naming_only_a_backends_resource_is_sent_to_the_webhook(plane: ControlPlane) -> None:
    """The match conditions select aliyun.com/gpu-mem alone: the webhook's line, not an unjudged pod."""
    response = _create(plane, _pod("ack-apiserver", "too-much", {"aliyun.com/gpu-mem": "30"}))
    assert response.status_code == 403, response.text
    message = json.loads(response.text)["message"]
    assert (
        'container "main": aliyun.com/gpu-mem 30 (GiB) is more than one GPU\'s memory (24 GiB): ACK GPU sharing '
        'gives each share the memory of one GPU (policy "notebooks-ack-sharing"); request at most 24, or whole GPUs '
        "as nvidia.com/gpu: N"
    ) in message


def test_acks_whole_gpus_and_multi_gpu_shares_are_stored_as_ack_schedules_them(plane: ControlPlane) -> None:
    """Whole GPUs get the exclusive pool's node affinity; the pod label aliyun.com/gpu-count spreads a pod's
    memory over that many GPUs, an equal whole number of GiB from each."""
    response = _create(plane, _pod("ack-apiserver", "whole", {"nvidia.com/gpu": "2"}))
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    required = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "ack.node.gpu.schedule", "operator": "NotIn", "values": ["cgpu", "core_mem", "mps", "share"]},
    ]}]  # fmt: skip
    spread = _pod("ack-apiserver", "two-gpus", {"aliyun.com/gpu-mem": "48"})  # 24 GiB of each of 2 A10s
    spread["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}
    assert _create(plane, spread).status_code == 201
    uneven = _pod("ack-apiserver", "uneven", {"aliyun.com/gpu-mem": "9"})
    uneven["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}
    response = _create(plane, uneven)
    assert response.status_code == 403, response.text
    assert (
        'pod: aliyun.com/gpu-mem 9 GiB in all over 2 GPUs (the pod label aliyun.com/gpu-count "2") is not a whole '
        "number of GiB from each: ACK takes an equal whole number of GiB from each GPU (policy "
        '"notebooks-ack-sharing"); request a multiple of 2 in all'
    ) in json.loads(response.text)["message"]
