"""DRA claims through a real kube-apiserver (v1.36): the shipped webhook configurations, the real gunicorn server.

A namespace capped at 2 GPUs per pod, NVIDIA's DeviceClass `gpu.nvidia.com` (serving nvidia.com/gpu) and a
node's 8 GPUs in a ResourceSlice (tests/fixtures/dra/): a ResourceClaimTemplate asking 4 GPUs, a ResourceClaim
asking `allocationMode: All` and a Pod asking `deviceclass.resource.kubernetes.io/gpu.nvidia.com: 4` are
denied, each with its exact line; what the API server's own validation refuses is denied by /mutate, in the
webhook's words; a claim within the cap is created untouched.

The API server, etcd and the webhook run on loopback: the session's API server (tests/envtest.py, from
$KUBEBUILDER_ASSETS) and kubectl (tests/k8s_tools.py); without them the module skips, saying which is missing.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import envtest
from tests.conftest import LiveServer
from tests.envtest import ControlPlane

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
NAMESPACE = "capped"
ONLY = "gpu-admission.io/test-dra"  # the webhook configurations of this module judge only namespaces with it

POLICY = f"""\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {{name: capped}}
spec:
  namespaces: [{NAMESPACE}]
  limits: {{maxPerPod: 2}}
"""
SHARED = "dra-shared"  # a namespace that shares GPUs by time-slicing (its own: others use "notebooks")
SHARED_POLICY = f"""\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {{name: notebooks}}
spec:
  namespaces: [{SHARED}]
  sharing: {{mode: time-slicing, replicas: 4}}
"""


@dataclass
class APIServer:
    kubectl_binary: Path
    kubeconfig: Path

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl_binary), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def create(self, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        # --validate=false: this build cannot serve its OpenAPI v2 as protobuf (the server's own validation runs).
        return self.kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(obj))


@pytest.fixture(scope="module")
def cluster(
    kube_apiserver: ControlPlane, kubectl: Path, start_server: Callable[..., LiveServer], tmp_path_factory
) -> Iterator[APIServer]:
    """The shared API server (tests/envtest.py), with NVIDIA's DeviceClasses, a node's 8 GPUs in a
    ResourceSlice, and the shipped webhook configurations pointed at a test server with the capped policy."""
    api = APIServer(kubectl, kube_apiserver.kubeconfig)
    policies = tmp_path_factory.mktemp("dra-policies")
    (policies / "capped.yaml").write_text(POLICY)
    (policies / "notebooks.yaml").write_text(SHARED_POLICY)
    server = start_server(policies)
    configurations = envtest.shipped_webhook_configurations(
        kubectl, server.url, server.ca_file.read_bytes(), "dra", ONLY
    )
    for obj in [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {ONLY: "true"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SHARED, "labels": {ONLY: "true"}}},
        # No controller manager makes it here, and the API server's admission wants it for pods.
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}},
        *yaml.safe_load_all((FIXTURES / "deviceclasses.yaml").read_text()),
        yaml.safe_load((FIXTURES / "resourceslice.yaml").read_text()),
        *configurations,
    ]:
        created = api.create(obj)
        assert created.returncode == 0, created.stderr
    yield api
    for configuration in configurations:
        api.kubectl("delete", configuration["kind"].lower(), configuration["metadata"]["name"])


def _fixture(name: str) -> dict[str, Any]:
    for document in yaml.safe_load_all((FIXTURES / "claims.yaml").read_text()):
        if document["metadata"]["name"] == name:
            return document | {"metadata": {"name": name, "namespace": NAMESPACE}}
    raise KeyError(name)


def _denied(created: subprocess.CompletedProcess[str], webhook: str) -> str:
    """The webhook's lines, from kubectl's `admission webhook "..." denied the request: ...`."""
    assert created.returncode != 0, created.stdout
    prefix = f'admission webhook "{webhook}" denied the request: '
    assert prefix in created.stderr, created.stderr
    return created.stderr.split(prefix, 1)[1].strip()


def test_the_device_class_serves_nvidia_gpu_as_the_issue_describes(cluster: APIServer) -> None:
    shown = cluster.kubectl("get", "deviceclass", "gpu.nvidia.com", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["spec"]["extendedResourceName"] == "nvidia.com/gpu"


def test_a_template_asking_four_gpus_is_denied(cluster: APIServer) -> None:
    assert _denied(cluster.create(_fixture("four-gpus")), "resourceclaimtemplates.gpu-admission.io") == (
        'template: 4 GPU devices (request "gpu": 4 from gpu.nvidia.com) exceed the per-pod maximum of 2 (policy '
        '"capped"): each pod made from this template gets its own 4; ask for at most 2, or split the work'
    )


def test_a_claim_asking_every_gpu_is_denied(cluster: APIServer) -> None:
    assert _denied(cluster.create(_fixture("every-gpu")), "resourceclaims.gpu-admission.io") == (
        'request "gpu": gpu.nvidia.com allocationMode All asks for every matching device of a node, which no cap '
        'can bound (policy "capped" allows at most 2 per pod); use allocationMode ExactCount with a count of at '
        "most 2"
    )


def test_what_the_api_server_would_refuse_is_denied_by_mutate_in_the_webhooks_words(cluster: APIServer) -> None:
    claim = copy.deepcopy(_fixture("every-gpu"))
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    assert _denied(cluster.create(claim), "resourceclaims.gpu-admission.io") == (
        'request "gpu": gpu.nvidia.com count 2 is set with allocationMode All (the API server refuses it anyway); '
        "remove count, or use allocationMode ExactCount"
    )


def test_a_pod_asking_the_device_class_resource_is_denied(cluster: APIServer) -> None:
    resource = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "four", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "app", "image": "example", "resources": {"limits": {resource: "4"}}}]},
    }  # fmt: skip
    assert _denied(cluster.create(pod), "pods.gpu-admission.io") == (
        f'pod: {resource} effective total 4 (container: "app"=4) exceeds the per-pod maximum of 2 (policy '
        '"capped"); request fewer or split the pod'
    )


def test_a_claim_within_the_cap_is_created_as_written(cluster: APIServer) -> None:
    claim = copy.deepcopy(_fixture("every-gpu"))
    claim["metadata"]["name"] = "two-gpus"
    claim["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu.nvidia.com", "count": 2}
    created = cluster.create(claim)
    assert created.returncode == 0, created.stderr
    shown = json.loads(cluster.kubectl("get", "resourceclaim", "two-gpus", "-n", NAMESPACE, "-o", "json").stdout)
    assert shown["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2,
    }  # fmt: skip


def test_under_time_slicing_a_claim_of_a_whole_gpu_needs_the_namespaces_gpu_config(cluster: APIServer) -> None:
    claim = copy.deepcopy(_fixture("every-gpu"))
    claim["metadata"] = {"name": "one-gpu", "namespace": SHARED}
    claim["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu.nvidia.com", "count": 1}
    assert _denied(cluster.create(claim), "resourceclaims.gpu-admission.io") == (
        'request "gpu": gpu.nvidia.com count 1 asks for whole GPUs with no GpuConfig to share them: the claim would '
        'hold them alone, and policy "notebooks" shares GPUs by time-slicing; add a config for this request with '
        "opaque driver gpu.nvidia.com and parameters apiVersion resource.nvidia.com/v1beta1, kind GpuConfig, "
        "sharing.strategy TimeSlicing"
    )
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing"},
    }
    claim["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}
    ]
    created = cluster.create(claim)
    assert created.returncode == 0, created.stderr
