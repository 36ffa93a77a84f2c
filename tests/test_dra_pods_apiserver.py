"""A pod's claims counted with its GPUs, through a real kube-apiserver (v1.36) and the shipped configurations.

The real gunicorn server watches the session's API server (tests/envtest.py, `--kubeconfig`): its claims cache
lists the ResourceClaims, and a pod asking `nvidia.com/gpu: 1` and naming a claim of 2 GPUs, in a namespace
capped at 2 per pod, reaches the webhook (the pod matchConditions match `spec.resourceClaims`) and is denied
with the exact line; a pod naming a claim the cache does not hold is created, with the warning. Skips, saying
what is missing, without $KUBEBUILDER_ASSETS or kubectl.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import envtest
from tests.conftest import LiveServer
from tests.envtest import ControlPlane
from tests.test_dra_apiserver import APIServer, _denied

NAMESPACE = "capped-pods"
ONLY = "gpu-admission.io/test-dra-pods"
POLICY = f"""\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {{name: capped}}
spec:
  namespaces: [{NAMESPACE}]
  limits: {{maxPerPod: 2}}
  cluster: {{fits: "off", offered: "off", drift: "off"}}
"""


TWO_GPUS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "two-gpus", "namespace": NAMESPACE},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}},
}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(
    kube_apiserver: ControlPlane, kubectl: Path, start_server: Callable[..., LiveServer], tmp_path_factory
) -> Iterator[tuple[APIServer, LiveServer]]:
    api = APIServer(kubectl, kube_apiserver.kubeconfig)
    policies = tmp_path_factory.mktemp("dra-pod-policies")
    (policies / "capped.yaml").write_text(POLICY)
    server = start_server(policies, extra_args=["--kubeconfig", str(kube_apiserver.kubeconfig)])
    configurations = envtest.shipped_webhook_configurations(
        kubectl, server.url, server.ca_file.read_bytes(), "dra-pods", ONLY
    )
    for obj in [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {ONLY: "true"}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}},
        TWO_GPUS,
        *configurations,
    ]:
        created = api.create(obj)
        assert created.returncode == 0, created.stderr
    deadline = time.monotonic() + 20
    while True:  # the worker's cache has the claim
        dra = server.get("/readyz").json().get("cluster", {}).get("dra", {})
        if dra.get("ResourceClaim", {}).get("objects", 0) >= 1:
            break
        assert time.monotonic() < deadline, dra
        time.sleep(0.1)
    yield api, server
    for configuration in configurations:
        api.kubectl("delete", configuration["kind"].lower(), configuration["metadata"]["name"])


def pod(name: str, claim: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
            "containers": [{"name": "train", "image": "example",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "gpus"}]}}],
        },
    }  # fmt: skip


def test_a_pod_mixing_an_extended_gpu_and_a_claim_is_denied_by_the_real_api_server(cluster) -> None:
    api, _ = cluster
    assert _denied(api.create(pod("mixed", "two-gpus")), "pods.gpu-admission.io") == (
        'pod: 3 GPUs in all (1 from nvidia.com/gpu, 2 from claim "gpus" (ResourceClaim "two-gpus")) exceed the '
        'per-pod maximum of 2 (policy "capped"): a pod\'s claims count with its extended resources; ask for at most '
        "2 in all, or split the pod"
    )


def test_a_pod_naming_a_claim_not_yet_made_is_created_with_the_warning(cluster) -> None:
    api, server = cluster
    created = api.create(pod("early", "made-later"))
    assert created.returncode == 0, created.stderr
    assert 'Warning: gpu-admission: claim "gpus": ResourceClaim "made-later" unknown yet; its GPUs are not counted' in (
        created.stderr
    )
    shown = json.loads(api.kubectl("get", "pod", "early", "-n", NAMESPACE, "-o", "json").stdout)
    assert shown["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimName": "made-later"}]
    metric = 'gpu_admission_dra_cache_misses_total{kind="ResourceClaim",state="current"}'
    assert server.metrics()[metric] >= 1
