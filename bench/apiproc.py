"""The loopback API (tests/fake_kube_api.py) in a process of its own.

A benchmark that drives the server with many client threads would otherwise share its interpreter, and so its
lock, with the API it measures against: every call to the API then waits for the client's threads as well, and a
review that calls the API more (a budget's reservation) pays for the client's work too. The API server is a
process of its own; so is this one.

`python -m bench.apiproc OBJECTS KUBECONFIG` loads the objects (a JSON list), serves them, writes a kubeconfig
for the server, prints one JSON line (`url`, `token`) and serves until its standard input closes.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from tests.fake_kube_api import COLLECTIONS, FakeKubeAPI


class ApiProcess:
    """The loopback API, started in a child process holding `objects`; read over HTTP like any API server."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="gpu-admission-api-")
        directory = Path(self._directory.name)
        (directory / "objects.json").write_text(json.dumps(objects))
        self.kubeconfig = directory / "kubeconfig"
        command = [sys.executable, "-m", "bench.apiproc", str(directory / "objects.json"), str(self.kubeconfig)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        started = json.loads(self.process.stdout.readline() or "{}")
        if "url" not in started:
            self.stop()
            raise RuntimeError("the loopback API did not start")
        self.url: str = started["url"]
        self.token: str = started["token"]

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(self.kubeconfig.read_text())
        return path

    def _get(self, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, None

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        prefix, plural = COLLECTIONS[kind]
        status, body = self._get(f"{prefix}/namespaces/{namespace}/{plural}/{name}")
        return body if status == 200 else None

    def counters(self) -> dict[str, int]:
        return self._get("/debug/counters")[1]

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._directory.cleanup()


class _Forgetful(list):  # type: ignore[type-arg]
    """The request log, kept empty: a benchmark's creates need none of it."""

    def append(self, item: Any) -> None:
        pass


def main(objects_file: str, kubeconfig: str) -> None:
    api = FakeKubeAPI()
    api.requests = _Forgetful()
    api.add(*json.loads(Path(objects_file).read_text()))
    api.start()
    gc.freeze()  # the objects loaded are never collected: later collections need not walk them
    api.write_kubeconfig(Path(kubeconfig))
    print(json.dumps({"url": api.url, "token": api.token}), flush=True)
    sys.stdin.read()  # until the benchmark closes it
    api.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
