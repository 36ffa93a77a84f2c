"""The API server's own refusals that README.md quotes (what happens without the webhook), as a real
kube-apiserver v1.36 prints them (tests/envtest.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _quoted() -> dict[str, str]:
    """README's `$ kubectl apply -f FILE` lines and the output under each, from the block that shows them."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(\$ kubectl apply -f examples/pod-requests-only\.yaml\n.*?)```", text, re.DOTALL)
    assert block is not None
    shown: dict[str, str] = {}
    for part in re.split(r"^\$ kubectl apply -f ", block.group(1), flags=re.MULTILINE)[1:]:
        file, _, output = part.partition("\n")
        shown[file] = output
    return shown


def test_the_readme_quotes_the_api_servers_refusals_as_v1_36_prints_them(kube_apiserver: Any, kubectl: Path) -> None:
    plane = kube_apiserver
    for namespace in ("default", "notebooks"):
        plane.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": namespace}})  # fmt: skip
        plane.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})  # fmt: skip
    shown = _quoted()
    assert list(shown) == ["examples/pod-requests-only.yaml", "examples/pod-fractional.yaml"]
    for file, expected in shown.items():
        run = subprocess.run([str(kubectl), "--kubeconfig", str(plane.kubeconfig), "apply", "--validate=false",
                              "-f", file], capture_output=True, text=True, cwd=ROOT, timeout=60)  # fmt: skip
        assert run.returncode == 1
        assert run.stderr == expected, file
