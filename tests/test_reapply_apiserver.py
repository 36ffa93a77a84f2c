"""Re-applies against a real kube-apiserver (v1.36) with the real webhook registered: the same file applied
twice, client-side (`kubectl apply`) and server-side (`kubectl apply --server-side`), changes nothing.

The webhook is `gpu-webhook serve` on loopback, registered with the shipped webhook configurations
(manifests/base/), whose clientConfig is pointed at it by URL with its CA. Skipped without KUBEBUILDER_ASSETS
(tests/envtest.py) or kubectl.
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

from tests import envtest
from tests.conftest import ROOT, LiveServer
from tests.envtest import ControlPlane

POLICIES = ROOT / "tests" / "fixtures" / "reapply"
TEST_LABEL = "gpu-admission.io/test-reapply"  # only namespaces with it are sent to this module's webhooks
RECORD = "gpu-admission.io/requested"


@dataclass
class Cluster:
    plane: ControlPlane
    kubectl: Path
    work: Path

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl), f"--kubeconfig={self.plane.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        path = {"Deployment": "apis/apps/v1", "Job": "apis/batch/v1"}[kind]
        plural = kind.lower() + "s"
        response = self.plane.request("GET", f"/{path}/namespaces/{namespace}/{plural}/{name}")
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def cluster(
    kube_apiserver: ControlPlane,
    kubectl: Path,
    start_server: Callable[..., LiveServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    server = start_server(POLICIES)
    configs = envtest.shipped_webhook_configurations(
        kubectl, server.url, server.cert.ca_cert.read_bytes(), "reapply", TEST_LABEL
    )
    for config in configs:
        plural = config["kind"].lower() + "s"
        response = kube_apiserver.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", config)
        assert response.status_code == 201, response.text
    yield Cluster(kube_apiserver, kubectl, tmp_path_factory.mktemp("manifests"))
    for config in configs:
        plural = config["kind"].lower() + "s"
        kube_apiserver.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}")


def _namespace(cluster: Cluster, name: str) -> str:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {TEST_LABEL: "true"}}}
    response = cluster.plane.request("POST", "/api/v1/namespaces", body)
    assert response.status_code in (201, 409), response.text
    return name


def workload(kind: str, name: str, namespace: str, gpu: Any) -> dict[str, Any]:
    """A workload as a user writes it: a GPU request (no limit), a literal env value, a CPU request."""
    container = {
        "name": "main",
        "image": "registry.example/train:1",
        "env": [{"name": "API_TOKEN", "value": "s3cret-literal"}],
        "resources": {"requests": {"nvidia.com/gpu": gpu, "cpu": "1"}},
    }
    template: dict[str, Any] = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}
    spec: dict[str, Any] = {"template": template}
    if kind == "Deployment":
        spec["selector"] = {"matchLabels": {"app": name}}
        spec["replicas"] = 1
        group = "apps/v1"
    else:
        template["spec"]["restartPolicy"] = "Never"
        group = "batch/v1"
    return {"apiVersion": group, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# (kind, namespace prefix, the request as written): the cases measured in the field.
CASES = [
    ("Deployment", "ts", 0.25),  # kept-name time-slicing: the second apply was denied (250m vs limit 1)
    ("Deployment", "mps", 0.125),  # renamed MPS: denied as "125m is fractional"
    ("Deployment", "mps", 1),  # renamed MPS: both nvidia.com/gpu and gpu.shared, a new rollout each apply
    ("Job", "ts", 0.25),  # a Job's template is immutable: any change is refused
    ("Job", "mps", 1),
]
APPLY = {"client": ["apply", "--validate=false"], "server": ["apply", "--server-side", "--validate=false"]}
DIFF = {"client": ["diff"], "server": ["diff", "--server-side"]}


def _template(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]


@pytest.mark.parametrize("mode", ["client", "server"])
@pytest.mark.parametrize(("kind", "prefix", "gpu"), CASES)
def test_the_same_manifest_applied_twice_changes_nothing(
    cluster: Cluster, mode: str, kind: str, prefix: str, gpu: Any
) -> None:
    namespace = _namespace(cluster, f"{prefix}-{mode}")
    name = f"{kind.lower()}-{str(gpu).replace('.', '-')}"
    manifest = json.dumps(workload(kind, name, namespace, gpu))
    first = cluster.run(*APPLY[mode], "-f", "-", stdin=manifest)
    assert first.returncode == 0, first.stderr
    stored = cluster.get(kind, namespace, name)
    assert stored["metadata"]["generation"] == 1
    assert RECORD in stored["metadata"]["annotations"]

    second = cluster.run(*APPLY[mode], "-f", "-", stdin=manifest)
    assert second.returncode == 0, second.stderr
    again = cluster.get(kind, namespace, name)
    assert again["metadata"]["generation"] == 1
    assert _template(again) == _template(stored)
    assert again["metadata"]["annotations"] == stored["metadata"]["annotations"]

    diff = cluster.run(*DIFF[mode], "-f", "-", stdin=manifest)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stderr  # (stderr has what the request becomes)


@pytest.mark.parametrize("mode", ["client", "server"])
@pytest.mark.parametrize("prefix", ["ts", "mps"])
def test_an_inference_engines_added_flag_is_stable_on_a_second_apply(cluster: Cluster, mode: str, prefix: str) -> None:
    """A vLLM server (the OpenAI image, arguments alone): the webhook appends --gpu-memory-utilization to its
    args, and applying the same file again changes nothing."""
    namespace = _namespace(cluster, f"{prefix}-vllm-{mode}")
    obj = workload("Deployment", "chat", namespace, 1)
    container = _template(obj)["spec"]["containers"][0]
    container.update(image="vllm/vllm-openai:v0.9.1", args=["--model", "Qwen/Qwen2.5-7B-Instruct"])
    manifest = json.dumps(obj)
    first = cluster.run(*APPLY[mode], "-f", "-", stdin=manifest)
    assert first.returncode == 0, first.stderr
    stored = cluster.get("Deployment", namespace, "chat")
    # ts-*: no GPU model, 2% of headroom; mps-*: 8 replicas of an H100 80GB, 512 MiB of it.
    flag = {"ts": "--gpu-memory-utilization=0.23", "mps": "--gpu-memory-utilization=0.1187"}[prefix]
    assert _template(stored)["spec"]["containers"][0]["args"] == ["--model", "Qwen/Qwen2.5-7B-Instruct", flag]
    second = cluster.run(*APPLY[mode], "-f", "-", stdin=manifest)
    assert second.returncode == 0, second.stderr
    again = cluster.get("Deployment", namespace, "chat")
    assert again["metadata"]["generation"] == 1
    assert _template(again) == _template(stored)
    diff = cluster.run(*DIFF[mode], "-f", "-", stdin=manifest)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stderr


def test_a_changed_request_gets_the_new_decision(cluster: Cluster) -> None:
    """0.25 -> 0.125 in the file: the second apply is judged as the new request (a new memory fraction)."""
    namespace = _namespace(cluster, "ts-change")
    first = workload("Deployment", "change", namespace, 0.25)
    assert cluster.run(*APPLY["client"], "-f", "-", stdin=json.dumps(first)).returncode == 0
    changed = copy.deepcopy(first)
    changed["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 0.125
    applied = cluster.run(*APPLY["client"], "-f", "-", stdin=json.dumps(changed))
    assert applied.returncode == 0, applied.stderr
    stored = cluster.get("Deployment", namespace, "change")
    container = _template(stored)["spec"]["containers"][0]
    gpu = {"nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": {**gpu, "cpu": "1"}, "limits": gpu}
    assert {"name": "GPU_ADMISSION_MEMORY_FRACTION", "value": "0.125"} in container["env"]
    assert stored["metadata"]["generation"] == 2
    assert cluster.run(*DIFF["client"], "-f", "-", stdin=json.dumps(changed)).returncode == 0
