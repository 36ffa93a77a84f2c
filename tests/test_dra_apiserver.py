"""DRA claims through a real kube-apiserver (v1.36): the shipped webhook configurations, the real gunicorn server.

A namespace capped at 2 GPUs per pod, NVIDIA's DeviceClass `gpu.nvidia.com` (serving nvidia.com/gpu) and a
node's 8 GPUs in a ResourceSlice (tests/fixtures/dra/): a ResourceClaimTemplate asking 4 GPUs, a ResourceClaim
asking `allocationMode: All` and a Pod asking `deviceclass.resource.kubernetes.io/gpu.nvidia.com: 4` are
denied, each with its exact line; what the API server's own validation refuses is denied by /mutate, in the
webhook's words; a claim within the cap is created untouched.

The API server, etcd and the webhook run on loopback. The binaries come from $KUBEBUILDER_ASSETS (the layout of
controller-runtime's envtest: `setup-envtest use 1.36`, or shared/envtest/setup here), kubectl from
tests/k8s_tools.py; without them the module skips, saying which is missing. Self-contained on purpose: a
reusable API-server fixture may replace `apiserver` below.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests import k8s_tools
from tests.conftest import LiveServer, free_port

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "dra"
ASSETS = os.environ.get("KUBEBUILDER_ASSETS", "")
KUBECTL = k8s_tools.binary("kubectl")
TOKEN = "gpu-admission-test-token"
NAMESPACE = "capped"

if not ASSETS or not (Path(ASSETS) / "kube-apiserver").is_file() or not (Path(ASSETS) / "etcd").is_file():
    pytest.skip(
        "KUBEBUILDER_ASSETS is unset or lacks kube-apiserver and etcd (setup-envtest use 1.36 provides them)",
        allow_module_level=True,
    )
if KUBECTL is None:
    pytest.skip(f"no kubectl: {k8s_tools.SKIP_HINT}", allow_module_level=True)

POLICY = f"""\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {{name: capped}}
spec:
  namespaces: [{NAMESPACE}]
  limits: {{maxPerPod: 2}}
"""


@dataclass
class APIServer:
    url: str
    kubeconfig: Path

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def create(self, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        # --validate=false: this build cannot serve its OpenAPI v2 as protobuf (the server's own validation runs).
        return self.kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(obj))


def _wait(process: subprocess.Popen, ready: Callable[[], bool], what: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(requests.RequestException):
            if ready():
                return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready within {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServer]:
    """etcd and kube-apiserver on loopback, with a token and AlwaysAllow (no kubelet, no scheduler)."""
    work = tmp_path_factory.mktemp("apiserver")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (work / "sa.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (work / "sa.pub").write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (work / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
    etcd_port, peer_port, port = free_port(), free_port(), free_port()
    processes: list[subprocess.Popen] = []
    try:
        with (work / "etcd.log").open("wb") as log:
            processes.append(subprocess.Popen([
                str(Path(ASSETS) / "etcd"), "--data-dir", str(work / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            ], stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        with (work / "apiserver.log").open("wb") as log:
            processes.append(subprocess.Popen([
                str(Path(ASSETS) / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--secure-port={port}", "--bind-address=127.0.0.1", f"--cert-dir={work / 'pki'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={work / 'sa.pub'}",
                f"--service-account-signing-key-file={work / 'sa.key'}",
                f"--token-auth-file={work / 'tokens.csv'}", "--authorization-mode=AlwaysAllow",
                "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            ], stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        url = f"https://127.0.0.1:{port}"
        ca = work / "pki" / "apiserver.crt"  # the self-signed chain the API server writes (its CA included)

        def ready() -> bool:
            if not ca.exists():
                return False
            headers = {"Authorization": f"Bearer {TOKEN}"}
            return requests.get(f"{url}/readyz", verify=str(ca), timeout=2, headers=headers).status_code == 200

        _wait(processes[1], ready, "kube-apiserver", work / "apiserver.log")
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority": str(ca)}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }))  # fmt: skip
        yield APIServer(url, kubeconfig)
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _shipped_configurations(server: LiveServer) -> list[dict[str, Any]]:
    """The shipped webhook configurations, every entry pointed at the test server by URL (with its CA)."""
    bundle = base64.b64encode(server.ca_file.read_bytes()).decode()
    configurations = []
    for name in ("mutatingwebhookconfiguration.yaml", "validatingwebhookconfiguration.yaml"):
        configuration = yaml.safe_load((ROOT / "manifests" / "base" / name).read_text())
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{server.url}{path}", "caBundle": bundle}
        configurations.append(configuration)
    return configurations


@pytest.fixture(scope="module")
def cluster(apiserver: APIServer, start_server: Callable[..., LiveServer], tmp_path_factory) -> APIServer:
    policies = tmp_path_factory.mktemp("dra-policies")
    (policies / "capped.yaml").write_text(POLICY)
    server = start_server(policies)
    for obj in [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        # No controller manager makes it here, and the API server's admission wants it for pods.
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}},
        *yaml.safe_load_all((FIXTURES / "deviceclasses.yaml").read_text()),
        yaml.safe_load((FIXTURES / "resourceslice.yaml").read_text()),
        *_shipped_configurations(server),
    ]:
        created = apiserver.create(obj)
        assert created.returncode == 0, created.stderr
    return apiserver


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
