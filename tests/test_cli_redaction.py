"""Env values in the CLI's output: `audit` (other teams' workloads, in every format) and `check --diff` (what
gets pasted into a review) print them redacted unless `--show-env-values` asks; the webhook's own
memory-fraction variables stay readable. The console script as CI runs it; `audit` against
tests/fake_kube_api.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fake_kube_api import FakeKubeAPI
from webhook.cli.output import REDACTED

GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"
POLICIES = str(Path(__file__).parent / "fixtures" / "cli" / "policies")
SECRET = "hunter2-do-not-print"


def gpu_webhook(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "GPU_ADMISSION_POLICIES", "NO_COLOR")}
    return subprocess.run([str(GPU_WEBHOOK), *args], capture_output=True, text=True, env=env, timeout=60)


def tenant_pod() -> dict[str, Any]:
    """A quarter GPU in a time-slicing namespace (`shared-*`): mutation rewrites its resources and env."""
    applied = {"apiVersion": "v1", "kind": "Pod", "spec": {"env": SECRET}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "shared-a",
            "uid": "uid-trainer",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "env": [
                        {"name": "DB_PASSWORD", "value": SECRET},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}},
                    ],
                    "resources": {"limits": {"nvidia.com/gpu": "250m"}, "requests": {"nvidia.com/gpu": "250m"}},
                }
            ]
        },
    }


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory):
    api = FakeKubeAPI()
    api.add(tenant_pod())
    api.start()
    yield str(api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig"))
    api.stop()


def test_audit_json_redacts_env_values_but_keeps_the_webhooks_own_and_the_references(kubeconfig):
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-o", "json")
    assert run.returncode == 0, run.stderr
    assert SECRET not in run.stdout
    (result,) = json.loads(run.stdout)["results"]
    env = result["object"]["spec"]["containers"][0]["env"]
    assert env[:2] == [
        {"name": "DB_PASSWORD", "value": REDACTED},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}},
    ]
    assert {"name": "GPU_MEMORY_FRACTION", "value": "0.25"} in env  # what the webhook writes stays readable
    annotations = result["object"]["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/last-applied-configuration"] == REDACTED
    # The patch appends the webhook's own entries one by one: no user's value is in it to redact.
    env_ops = [op for op in result["patch"] if "/env" in op["path"]]
    assert env_ops and all(op["path"].endswith("/env/-") for op in env_ops)
    assert {op["value"]["name"] for op in env_ops}.isdisjoint({"DB_PASSWORD", "TOKEN"})
    shown = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, "-o", "json", "--show-env-values")
    assert json.loads(shown.stdout)["results"][0]["object"]["spec"]["containers"][0]["env"][0]["value"] == SECRET


@pytest.mark.parametrize("output", [["--diff"], ["-o", "yaml"]])
def test_audit_diff_and_yaml_redact_env_values(kubeconfig, output):
    run = gpu_webhook("audit", "--kubeconfig", kubeconfig, "--policies", POLICIES, *output)
    assert run.returncode == 0, run.stderr
    assert SECRET not in run.stdout and REDACTED in run.stdout


def test_check_diff_redacts_env_values_unless_asked_and_its_yaml_stays_the_users_manifest(tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(tenant_pod()))
    run = gpu_webhook("check", "--policies", POLICIES, "--diff", str(manifest))
    assert run.returncode == 0, run.stderr
    assert SECRET not in run.stdout
    assert f"    kubectl.kubernetes.io/last-applied-configuration: '{REDACTED}'\n" in run.stdout
    assert '+    - name: GPU_MEMORY_FRACTION\n+      value: "0.25"\n' in run.stdout
    shown = gpu_webhook("check", "--policies", POLICIES, "--diff", "--show-env-values", str(manifest))
    assert SECRET in shown.stdout
    # -o yaml is a post-renderer's output: the manifest itself, values and all.
    rendered = gpu_webhook("check", "--policies", POLICIES, "-o", "yaml", str(manifest))
    assert SECRET in rendered.stdout
