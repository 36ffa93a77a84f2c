"""Benchmark 4: `gpu-webhook check` on 1,000 manifests in multi-document files.

A GitOps repository in miniature, generated into a temporary directory (seeded, so every run checks the
same files): 100 YAML files of 10 documents each, 40% Deployments, 30% Pods, 20% Jobs, 10% StatefulSets and
CronJobs, 1 to 3 containers each, about half of them asking for GPUs (whole, fractional, a few too many), in
namespaces that the shipped policies map to time-slicing, MPS, MIG and the default. `gpu-webhook check DIR
--policies policies` runs as a subprocess, as CI would run it: wall time from start to exit, interpreter
start-up included, best of 3.
Targets: under 2 s.

Also timed, without a target: `gpu-webhook policy lint` on 1,000 policies with one glob each (`teamNNNN-*`),
the scale at which lint's search for glob ties must stay fast (the README says under a second).
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import check, table, write_results

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "examples" / "policies"  # a policy per sharing mode; the built-in defaults elsewhere
FILES, DOCS_PER_FILE = 100, 10
RUNS = 3
NAMESPACES = ["notebooks", "notebook-ml", "inference", "inference-eu", "batch", "mig-a", "team-a", "default"]
KINDS = [("Deployment", 40), ("Pod", 30), ("Job", 20), ("StatefulSet", 5), ("CronJob", 5)]


def container(rng: random.Random, name: str, gpu: str | None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": rng.choice(["100m", "500m", "2"]), "memory": "512Mi"}}
    if gpu is not None:
        # As people write them: limits only (the API server copies them into requests), or both.
        resources["limits"] = {"nvidia.com/gpu": gpu, "memory": "8Gi"}
        if rng.random() < 0.5:
            resources["requests"]["nvidia.com/gpu"] = gpu
    return {
        "name": name,
        "image": f"registry.example/team/{name}:{rng.randint(1, 40)}",
        "ports": [{"containerPort": 8080}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}],
        "resources": resources,
    }


def pod_spec(rng: random.Random) -> dict[str, Any]:
    gpu_pod = rng.random() < 0.5
    containers = []
    for i in range(rng.randint(1, 3)):
        gpu = None
        if gpu_pod and i == 0:
            gpu = rng.choices(["1", "2", "0.5", "4"], weights=[70, 15, 10, 5])[0]
        containers.append(container(rng, f"c{i}", gpu))
    return {"containers": containers, "restartPolicy": "Always"}


def manifest(rng: random.Random, index: int) -> dict[str, Any]:
    kind = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
    name = f"{kind.lower()}-{index}"
    metadata = {"name": name, "namespace": rng.choice(NAMESPACES), "labels": {"app": name}}
    spec = pod_spec(rng)
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if kind == "Job":
        spec["restartPolicy"] = "Never"
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": template}}
    if kind == "CronJob":
        spec["restartPolicy"] = "OnFailure"
        job = {"template": template}
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata,
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job}}}  # fmt: skip
    workload = {"replicas": rng.randint(1, 4), "selector": {"matchLabels": {"app": name}}, "template": template}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": workload}


def generate(directory: Path, seed: int = 5) -> int:
    """Write FILES x DOCS_PER_FILE manifests; the number written."""
    rng = random.Random(seed)
    count = 0
    for f in range(FILES):
        docs = [manifest(rng, count + d) for d in range(DOCS_PER_FILE)]
        count += len(docs)
        (directory / f"app-{f:03d}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return count


def gpu_webhook() -> list[str]:
    script = Path(sys.executable).with_name("gpu-webhook")
    return [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]


LINT_POLICIES = 1_000


def lint_seconds(directory: Path) -> float:
    """Best wall time of `policy lint` on LINT_POLICIES policies, one glob each, in one file."""
    directory.mkdir()
    docs = [
        "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\n"
        f"metadata: {{name: team{i:04d}}}\nspec:\n  namespaces: ['team{i:04d}-*']\n"
        for i in range(LINT_POLICIES)
    ]
    (directory / "teams.yaml").write_text("---\n".join(docs))
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        done = subprocess.run([*gpu_webhook(), "policy", "lint", str(directory)], capture_output=True, timeout=600)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"gpu-webhook policy lint failed with exit code {done.returncode}")
    return min(times)


def main() -> bool:
    with tempfile.TemporaryDirectory(prefix="gpu-admission-cli-") as tmp:
        directory = Path(tmp)
        count = generate(directory)
        command = [*gpu_webhook(), "check", str(directory), "--policies", str(POLICIES)]
        times: list[float] = []
        for _ in range(RUNS):
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            times.append(time.perf_counter() - start)
            if done.returncode not in (0, 1):  # 1: some are denied, as in any real repository
                print(done.stderr[-2000:], file=sys.stderr)
                raise RuntimeError(f"gpu-webhook check failed with exit code {done.returncode}")
        summary = done.stdout.strip().splitlines()[-1]
        start = time.perf_counter()
        subprocess.run([*gpu_webhook(), "--help"], capture_output=True, timeout=60)
        startup = time.perf_counter() - start
        lint = lint_seconds(directory / "glob-policies")
    best = min(times)
    print(
        table(
            f"gpu-webhook check, {count:,} manifests in {FILES} files (subprocess, wall time)",
            ["run", "seconds"],
            [
                *((f"run {i + 1}", f"{t:.2f}") for i, t in enumerate(times)),
                ("best", f"{best:.2f}"),
                ("`gpu-webhook --help` (start-up alone)", f"{startup:.2f}"),
                (f"`policy lint`, {LINT_POLICIES:,} one-glob policies (best of {RUNS})", f"{lint:.2f}"),
            ],
        )
    )
    print(f"  {summary}")
    print(f"  per manifest: {best / count * 1e6:,.0f} µs (start-up included)")
    ok = check([("check on 1,000 manifests < 2 s", best < 2.0, f"{best:.2f} s (best of {RUNS})")])
    write_results(
        "cli",
        {"manifests": count, "files": FILES, "runs_s": times, "best_s": best, "startup_s": startup,
         "summary": summary, "lint_policies": LINT_POLICIES, "lint_best_s": lint, "targets_met": ok},
    )  # fmt: skip
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
