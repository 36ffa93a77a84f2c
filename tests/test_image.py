"""The container image (Containerfile), built and started for real.

No image registry is reachable from the test machines, so the base image is made from Debian packages
(mmdebstrap: Debian 12 with python3 and its venv module) and imported into podman; it is kept between runs
under BASE_IMAGE (`podman rmi` it to make it again). The image is built as a CI system builds it: a fresh copy
of the tree (what a clone holds) and the plain `podman build .`, which installs the locked set from the package
index (reached here once the host's CA certificates are mounted into the build); the air-gapped path is built
too, from `make wheels` with the network off (alongside the plain build). The build uses chroot
isolation, and the image's entrypoint runs under `buildah run --isolation=chroot` (`podman run` cannot set
rlimits on these machines; chroot isolation honours USER and shares the host's network, so the host reaches the
server on loopback).

Under xdist the builds start in the background as soon as the collection shows these tests
(tests/image_builds.py, the one home of both builds), and the fixtures below wait for them.

Skipped, with the reason, where podman, buildah or mmdebstrap is missing: `.ci/run` installs them.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import requests

from tests import image_builds
from tests.conftest import free_port
from webhook import __version__
from webhook.admission.review import make_review
from webhook.certs import CertPaths

ROOT = Path(__file__).resolve().parent.parent
UID = 65532  # the Containerfile's USER and the Deployment's runAsUser
VENV_PYTHON = "/opt/gpu-admission/bin/python"  # the build stage has no PATH to it; the final stage does

needs_tools = pytest.mark.skipif(
    bool(image_builds.MISSING),
    reason=f"{', '.join(image_builds.MISSING)} not installed "
    "(apt-get install -y podman buildah mmdebstrap; .ci/run does)",
)
run = image_builds.run


def test_the_containerfile_builds_on_an_official_python_from_the_lock_alone() -> None:
    """The default BASE is only a build argument: no test pulls it (no registry is reachable here)."""
    text = (ROOT / "Containerfile").read_text()
    assert "ARG BASE=docker.io/library/python:3.11-slim-bookworm\n" in text
    assert [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")] == ["${BASE}", "${BASE}"]
    assert f"USER {UID}:{UID}\n" in text
    assert '"--require-hashes", "--no-deps"' in text  # the locked set only, each file's hash checked
    assert "build/" not in text  # nothing the host prepares is needed
    assert "python3-venv" in " ".join(image_builds.DEBOOTSTRAP)  # the tests' base has what the Containerfile runs


def background(request: pytest.FixtureRequest) -> Path | None:
    """Where the controller's background builds write their results, where it started them (under xdist)."""
    directory = getattr(request.config, "workerinput", {}).get("image_builds")
    return Path(directory) if directory and image_builds.started(Path(directory)) else None


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The plain build command in a fresh copy of the tree, on the Debian base: no host step before it."""
    directory = background(request)
    if directory is not None:
        yield image_builds.wait(directory, "plain")  # removed by the controller at the end
        return
    scratch = tmp_path_factory.mktemp("plain")
    tag = image_builds.build_plain(
        scratch, image_builds.base_image(scratch), f"localhost/gpu-admission:test-{os.getpid()}"
    )
    yield tag
    subprocess.run(["podman", "rmi", "--force", tag], capture_output=True)


@pytest.fixture(scope="module")
def air_gapped_image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[str]]:
    """The air-gapped build stage: started at once and carried on in a thread, beside the plain build of `image`
    when a test asks for both (the test waits); or the controller's, waited for."""
    directory = background(request)
    scratch = tmp_path_factory.mktemp("offline")
    tag = f"localhost/gpu-admission:offline-{os.getpid()}"
    with ThreadPoolExecutor(1) as pool:
        if directory is not None:
            yield pool.submit(image_builds.wait, directory, "offline")
            return
        base = image_builds.base_image(scratch)  # first, here: the plain build's fixture finds it made
        future = pool.submit(image_builds.build_offline, scratch, base, tag)
        try:
            yield future
        finally:
            wait([future])
            subprocess.run(["podman", "rmi", "--force", tag], capture_output=True)


@needs_tools
def test_an_air_gapped_build_installs_the_same_locked_set_with_the_network_off(
    air_gapped_image: Future[str], image: str
) -> None:
    """`make wheels` where the index is reachable, then the build without it: the same packages (the build
    stage's venv, which the final stage copies as it is).

    Chroot isolation cannot turn the build's network off, so the index it is given is one that answers nothing
    (a closed loopback port) and no CA is mounted: a download would fail the build."""
    tag = air_gapped_image.result()
    freeze = "import importlib.metadata as m; print(sorted(f'{d.name} {d.version}' for d in m.distributions()))"
    listed = []
    for name in (tag, image):
        container = run("buildah", "from", name).strip()
        try:
            listed.append(run("buildah", "run", "--isolation=chroot", container, "--", VENV_PYTHON, "-c", freeze))
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True)
    assert listed[0] == listed[1] and "gpu-admission 0.1.0" in listed[0]


@pytest.fixture(scope="module")
def config(image: str) -> dict[str, Any]:
    return json.loads(run("podman", "image", "inspect", image))[0]["Config"]


@pytest.fixture
def container(image: str) -> Iterator[str]:
    name = run("buildah", "from", image).strip()
    yield name
    subprocess.run(["buildah", "rm", name], capture_output=True)


def entrypoint_run(container: str, config: dict[str, Any], *args: str, volumes: tuple[str, ...] = ()) -> list[str]:
    """`buildah run` of the image's own entrypoint (buildah run does not apply it by itself)."""
    mounts = [arg for volume in volumes for arg in ("-v", volume)]
    return ["buildah", "run", "--isolation=chroot", *mounts, container, "--", *config["Entrypoint"], *args]


@needs_tools
def test_the_image_carries_oci_labels_and_runs_as_65532(config: dict[str, Any]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__ == project["version"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]["text"]
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["gpu-webhook"]
    # The Deployment's command and preStop need these on PATH: no shell is involved anywhere.
    assert config["Cmd"][0] == "serve"


@needs_tools
def test_the_entrypoint_prints_the_version_as_uid_65532(container: str, config: dict[str, Any]) -> None:
    assert run(*entrypoint_run(container, config, "--version")) == f"gpu-webhook {__version__}\n"
    who = ["buildah", "run", "--isolation=chroot", container, "--", "python3", "-c", "import os; print(os.getuid())"]
    assert run(*who) == f"{UID}\n"


def _wait_ready(url: str, ca_file: Path, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited {process.returncode}:\n{log.read_text()[-4000:]}"
        try:
            if requests.get(f"{url}/readyz", verify=str(ca_file), timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"not ready in 60 s:\n{log.read_text()[-4000:]}")


def _stops_answering(url: str, ca_file: Path) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(f"{url}/healthz", verify=str(ca_file), timeout=1)
        except requests.ConnectionError:
            return True
        except requests.Timeout:
            pass  # accepted but not answered: still shutting down
        time.sleep(0.2)
    return False


@needs_tools
def test_serve_answers_healthz_and_a_review_over_https_from_the_host(
    container: str, config: dict[str, Any], dev_certs: CertPaths, tmp_path: Path
) -> None:
    # The Secret and the ConfigMap as the kubelet mounts them: read-only directories the server's uid can read
    # (in the cluster through fsGroup; here the throw-away key is simply world-readable).
    tls = tmp_path / "tls"
    tls.mkdir()
    for source, name in ((dev_certs.tls_cert, "tls.crt"), (dev_certs.tls_key, "tls.key")):
        shutil.copy(source, tls / name)
        (tls / name).chmod(0o644)
    tls.chmod(0o755)
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    policies.chmod(0o755)
    port, metrics_port = free_port(), free_port()
    # The image's own CMD, as the Deployment runs it, on loopback ports of this machine.
    args = [*config["Cmd"], "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
            "--workers", "1"]  # fmt: skip
    volumes = (f"{tls}:/etc/gpu-admission/tls:ro", f"{policies}:/etc/gpu-admission/policies:ro")
    marker = tmp_path / "started"
    marker.touch()
    time.sleep(0.01)
    log = tmp_path / "serve.log"
    url = f"https://127.0.0.1:{port}"
    with log.open("w") as out:
        process = subprocess.Popen(entrypoint_run(container, config, *args, volumes=volumes), stdout=out, stderr=out)
    try:
        _wait_ready(url, dev_certs.ca_cert, process, log)
        session = requests.Session()
        session.trust_env = False  # else REQUESTS_CA_BUNDLE from the environment wins over `verify`
        session.verify = str(dev_certs.ca_cert)  # a verifying client: the mounted certificate is what answers
        assert session.get(f"{url}/healthz", timeout=5).status_code == 200
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "train:1",
                                     "resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
        }  # fmt: skip
        mutated = session.post(f"{url}/mutate", json=make_review(pod, namespace="team-a"), timeout=5).json()
        assert mutated["response"]["allowed"] is True
        patch = json.loads(base64.b64decode(mutated["response"]["patch"]))
        after = jsonpatch.apply_patch(pod, patch)
        assert after["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "0.5"}}
        denied = session.post(f"{url}/validate", json=make_review(pod, namespace="team-a"), timeout=5).json()
        assert denied["response"]["allowed"] is False
        assert denied["response"]["status"]["message"].startswith('container "main": nvidia.com/gpu')
        metrics = session.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert "gpu_admission" in metrics
    finally:
        # buildah ends its child with SIGKILL when it is told to stop, so the server's own graceful shutdown is
        # not what this shows (tests/test_server_lifecycle.py does); only that nothing is left behind.
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert _stops_answering(url, dev_certs.ca_cert), "the server outlived `buildah run`"
    # A read-only root filesystem works: the server wrote nothing into the image's filesystem (the paths
    # below are the mount points buildah made, its /run and the /etc/hosts and /etc/resolv.conf it writes).
    root = Path(run("buildah", "mount", container).strip())
    try:
        written = sorted(
            "/" + str(path.relative_to(root))
            for path in root.rglob("*")
            if not path.is_symlink()
            and path.stat().st_mtime > marker.stat().st_mtime
            and not str(path.relative_to(root)).startswith(("proc", "sys", "dev"))
        )
    finally:
        subprocess.run(["buildah", "umount", container], capture_output=True)
    allowed = {"/etc", "/etc/gpu-admission", "/etc/gpu-admission/tls", "/etc/gpu-admission/policies", "/run",
               "/etc/hosts", "/etc/resolv.conf", "/etc/hostname"}  # fmt: skip
    assert set(written) <= allowed, sorted(set(written) - allowed)
