"""Fixtures that run the real webhook: `gpu-webhook serve` (gunicorn, TLS) on free loopback ports.

- `dev_certs` (session): a CA and serving certificate for localhost and 127.0.0.1 in a temporary directory.
- `start_server(policies_dir=..., cert=..., **opts)` (session): starts a server and waits for /readyz;
  every server it started and a test did not stop is killed at the end of the session, with its workers.
- `live_server` (module): one server per test module, on a copy of the shipped `policies/` (the default
  policy) and the example sharing policies of `examples/policies/`, which the module's tests may edit.

A test that is about stopping stops its server itself (`stop()`, SIGTERM, as a kubelet does); the rest are
killed (`discard()`), since waiting on a graceful stop that no test looks at only makes the suite slower.

Tests talk HTTPS with `requests`, verifying the generated CA (`server.session()`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import settings

from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.policy.model import PolicySet
from webhook.certs import CertPaths, certificate_not_after, generate_dev_certs

ROOT = Path(__file__).resolve().parent.parent

# Hypothesis: no per-example deadline anywhere. The suite's two workers share two cores with whatever else the
# machine runs, so a deadline there measures the machine, not the code; the benchmarks measure the code.
settings.register_profile("gpu-admission", deadline=None)
settings.load_profile("gpu-admission")
SHIPPED_POLICIES = ROOT / "policies"  # what the project ships: the default policy, which the manifests carry
EXAMPLE_POLICIES = ROOT / "examples" / "policies"  # one policy per sharing mode: time-slicing, MPS, MIG
READY_TIMEOUT = 20.0  # seconds; a server is normally ready in well under 2


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port no listener holds now and that this process has not handed out before: the kernel may give the
    same free port to two binds in a row, and a server given it for HTTPS and metrics would not start."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def gpu_webhook_command() -> list[str]:
    """The installed `gpu-webhook` script next to this interpreter, else `python -m webhook`."""
    script = Path(sys.executable).with_name("gpu-webhook")
    return [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]


@dataclass
class LiveServer:
    """A running `gpu-webhook serve`."""

    url: str
    ca_file: Path
    metrics_url: str
    policies_dir: Path
    cert: CertPaths
    process: subprocess.Popen
    log_file: Path
    args: list[str] = field(default_factory=list)
    sessions: weakref.WeakSet[requests.Session] = field(default_factory=weakref.WeakSet)  # session()'s, in use

    def session(self) -> requests.Session:
        session = requests.Session()
        self.sessions.add(session)
        session.trust_env = False  # else REQUESTS_CA_BUNDLE or a proxy from the environment wins over `verify`
        session.verify = str(self.ca_file)
        return session

    def post(self, path: str, payload: Any, session: requests.Session | None = None, **kw: Any) -> requests.Response:
        http = session or self.session()
        kw.setdefault("timeout", 10)
        return http.post(f"{self.url}{path}", json=payload, **kw)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 10)
        return requests.get(f"{self.url}{path}", verify=str(self.ca_file), **kwargs)

    def metrics(self) -> dict[str, float]:
        """The metrics endpoint's samples: `name{label="v",...}` (labels sorted) -> value."""
        text = requests.get(self.metrics_url, timeout=10).text
        return parse_metrics(text)

    def cert_not_after(self) -> Any:
        return certificate_not_after(self.cert.tls_cert)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON lines of the server's log (the banner's plain lines are skipped)."""
        records = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    records.append(json.loads(line))
        return records

    def wait_for_log(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.log_records():
                if predicate(record):
                    return record
            time.sleep(0.1)
        raise AssertionError(f"no such log line within {timeout} s; log:\n{self.log()[-4000:]}")

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def close_sessions(self) -> None:
        """Close the clients' kept-alive connections: a stopping server waits a little for one to send more."""
        for session in list(self.sessions):
            session.close()

    def discard(self) -> None:
        """Kill the server and its workers at once (their own process group): for servers no test stops."""
        self.close_sessions()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        self.close_sessions()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def parse_metrics(text: str) -> dict[str, float]:
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if "{" in name:
            base, _, labels = name.partition("{")
            parts = sorted(p for p in labels.rstrip("}").split(",") if p)
            name = f"{base}{{{','.join(parts)}}}"
        samples[name] = float(value)
    return samples


@pytest.fixture(scope="session")
def dev_certs(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return generate_dev_certs(tmp_path_factory.mktemp("dev-certs"))


def shipped_and_example_policies() -> PolicySet:
    """The shipped default policy and the example policies in one set, read where they are (as `live_server`
    serves them), each named by its path in the repository."""
    files = [path for directory in (SHIPPED_POLICIES, EXAMPLE_POLICIES) for path in sorted(directory.glob("*.yaml"))]
    return parse_policy_sources({path.relative_to(ROOT).as_posix(): path.read_text() for path in files})


def copy_policies(destination: Path, *sources: Path) -> Path:
    """The policy files of `sources` (default: the shipped and the example policies) in one directory."""
    destination.mkdir(parents=True, exist_ok=True)
    for source in sources or (SHIPPED_POLICIES, EXAMPLE_POLICIES):
        for path in sorted(source.iterdir()):
            if path.is_file():
                shutil.copy(path, destination / path.name)
    return destination


@pytest.fixture(scope="session")
def start_server(dev_certs: CertPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LiveServer]]:
    started: list[LiveServer] = []

    def start(
        policies_dir: Path | str | None = None,
        cert: CertPaths | None = None,
        *,
        workers: int = 1,
        threads: int = 4,
        cert_reload_interval: float | None = None,
        extra_args: Sequence[str] = (),
        wait: bool = True,
        cwd: Path | None = None,
        policy_source: str = "files",
    ) -> LiveServer:
        """Start `gpu-webhook serve`; with `wait`, return once /readyz answers 200. `policy_source` "cluster":
        the GPUPolicy objects of the API server that `extra_args`' --kubeconfig names, no directory."""
        cert = cert or dev_certs
        work = tmp_path_factory.mktemp("server")
        if policies_dir is None:
            policies_dir = copy_policies(work / "policies")
        port, metrics_port = free_port(), free_port()
        args = [
            *gpu_webhook_command(), "serve",
            "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
            "--cert-file", str(cert.tls_cert), "--key-file", str(cert.tls_key),
            "--workers", str(workers), "--threads", str(threads),
        ]  # fmt: skip
        args += ["--policies", str(policies_dir)] if policy_source == "files" else ["--policy-source", policy_source]
        if cert_reload_interval is not None:
            args += ["--cert-reload-interval", str(cert_reload_interval)]
        args += list(extra_args)
        env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "GPU_ADMISSION_POLICIES")}
        log_file = work / "server.log"
        with log_file.open("wb") as sink:
            process = subprocess.Popen(
                args, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=cwd or work, process_group=0
            )
        server = LiveServer(
            url=f"https://127.0.0.1:{port}",
            ca_file=cert.ca_cert,
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            policies_dir=Path(policies_dir),
            cert=cert,
            process=process,
            log_file=log_file,
            args=args,
        )
        started.append(server)
        if wait:
            wait_until_ready(server)
        return server

    yield start
    for server in started:
        server.discard()


def wait_until_ready(server: LiveServer, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"server exited with {server.process.returncode}:\n{server.log()}")
        try:
            if server.get("/readyz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    server.stop()
    raise AssertionError(f"server not ready within {timeout} s:\n{server.log()}")


@pytest.fixture(scope="module")
def live_server(start_server: Callable[..., LiveServer]) -> Iterator[LiveServer]:
    server = start_server()
    yield server
    server.discard()  # not idle for the rest of the session


# pytest-timeout's default (pyproject.toml: 120 s) fails a hung test with its stack; these run long by design:
# the soak (minutes) and the image build (debootstrapping a base image the first time).
LONG_TIMEOUT_S = 1800


def pytest_sessionstart(session: pytest.Session) -> None:
    """The package's bytecode, written once before the tests start the hundreds of `gpu-webhook` processes
    (servers, workers, CLI runs) that import it: where PYTHONDONTWRITEBYTECODE is set, each would otherwise
    compile every changed module again. Once per run: in the controller, not in each xdist worker."""
    if not hasattr(session.config, "workerinput"):
        import compileall

        compileall.compile_dir(ROOT / "webhook", quiet=1)


# The container image builds (tests/image_builds.py): under xdist, started by the controller in the background
# once a worker's collection holds an image test, so they run beside the other tests instead of holding a worker.
_image_builds: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _image_builds["directory"] = Path(tempfile.mkdtemp(prefix="gpu-admission-images-"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Each xdist worker is told where the background builds write their results."""
    if "directory" in _image_builds:
        node.workerinput["image_builds"] = str(_image_builds["directory"])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: Sequence[str]) -> None:
    """The builds start once, when the first worker's collection (after -k and -m) holds an image test; the
    controller schedules no test before every worker has reported its collection."""
    from tests import image_builds

    directory = _image_builds.get("directory")
    if directory is None or "builder" in _image_builds or image_builds.MISSING:
        return
    if any(nodeid.startswith("tests/test_image.py::") for nodeid in ids):
        _image_builds["builder"] = image_builds.start(directory)


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = _image_builds.pop("directory", None)
    if directory is not None:
        from tests import image_builds

        image_builds.stop(directory, _image_builds.pop("builder", None))


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """The test modules, with their asserts rewritten by pytest, cached in tests/__pycache__ as pytest does by
    default: where PYTHONDONTWRITEBYTECODE is set, every process (each xdist worker) would otherwise rewrite
    and compile every test module again on every run. pytest checks each cached file against its source."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = before


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` leaves out the long `soak` tests; `make soak` (`-m soak`), or any `-m`, decides itself.

    The tests that run a server go first (each module's in its own order): they spend most of their time
    waiting on the server's timers, and xdist hands out the items in this order, so the run ends on the many
    short in-process tests, which the two workers share evenly, instead of one worker finishing a module of
    waits alone."""
    items.sort(key=lambda item: "start_server" not in getattr(item, "fixturenames", ()))
    for item in items:
        if item.get_closest_marker("soak") or item.path.name == "test_image.py":
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
    if config.getoption("markexpr"):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real kube-apiserver (with etcd) for the session (tests/envtest.py); skipped where KUBEBUILDER_ASSETS
    is unset."""
    from tests import envtest

    assets = envtest.assets()
    if assets is None:
        pytest.skip(envtest.ASSETS_MISSING)
    plane = envtest.start_control_plane(assets, tmp_path_factory.mktemp("apiserver"))
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kubectl binary (tests/k8s_tools.py says where it is found); skipped where there is none."""
    from tests import k8s_tools

    found = k8s_tools.binary("kubectl")
    if found is None:
        pytest.skip(f"no kubectl ({k8s_tools.SKIP_HINT})")
    return Path(found)
