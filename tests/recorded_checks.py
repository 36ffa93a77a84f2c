"""The recorded decisions: `gpu-webhook check -o json` and `check --diff` of every manifest fixture under
every policy set the project ships or tests with, as text under tests/fixtures/recorded/.

The record is the proof that a reorganisation of the admission core changed no behaviour: the code as it was
wrote it, and tests/test_recorded_checks.py runs the same commands and asks for the same bytes. When a
change of behaviour is meant, rewrite it and read the diff in review:

    .venv/bin/python -m tests.recorded_checks

Policy sets: policies/ (the defaults), examples/policies, the test fixtures' policy files, the drift
fixture's policies (tests/gfd_cluster.py) and each single policy of those with `namespaces: ["*"]`, so that
every sharing mode meets every manifest whatever namespace it names. The sets that name a cluster run again
with `--cluster` against the drift fixture's nodes and DRA's fixture slices (its fits, offered and drift
lines). The command is the CLI's own `main`, called in-process (a process per case would take minutes).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "fixtures" / "recorded"

# Manifests: every example and fixture a user could hand to `check` (relative to ROOT, as sources print).
MANIFEST_DIRS = (
    "examples",
    "tests/fixtures/cli/manifests",
    "tests/fixtures/cli/broken",
    "tests/fixtures/custom-resources",
    "tests/fixtures/dra",
    "tests/fixtures/gpu-stack",
)
# Policy directories as shipped or as the tests load them.
POLICY_DIRS = ("policies", "examples/policies", "tests/fixtures/cli/policies", "tests/fixtures/reapply")
# Their policies one by one, each for every namespace (the drift fixture's policies join them).
SINGLE_POLICY_SOURCES = {
    "examples/policies": "examples",
    "tests/fixtures/cli/policies": "cli",
    "tests/fixtures/reapply": "reapply",
}
POLICY_DIR_MARK = "<policies>"  # the temporary directory's path, in the record


@dataclass(frozen=True)
class PolicySet:
    name: str  # the record's file name
    directory: Path
    cluster: bool  # run again with --cluster


def manifests() -> list[str]:
    found: list[str] = []
    for directory in MANIFEST_DIRS:
        for path in sorted((ROOT / directory).iterdir()):
            if path.is_file() and path.suffix in (".yaml", ".yml", ".json"):
                found.append(path.relative_to(ROOT).as_posix())
    return found


def _documents(directory: Path) -> list[dict[str, Any]]:
    """Every policy document in `directory`, in file then document order."""
    found = []
    for path in sorted(directory.glob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(doc, dict)]
    return found


def _write(directory: Path, documents: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True)
    text = "---\n".join(yaml.safe_dump(document, sort_keys=False) for document in documents)
    (directory / "policies.yaml").write_text(text, encoding="utf-8")
    return directory


@contextlib.contextmanager
def policy_sets() -> Iterator[list[PolicySet]]:
    """Every policy set, the derived ones written to a temporary directory for the time of the block."""
    from tests.gfd_cluster import POLICIES

    with tempfile.TemporaryDirectory(prefix="recorded-") as tmp:
        base = Path(tmp)
        sets = [
            PolicySet(directory.replace("/", "-"), ROOT / directory, cluster=directory == "examples/policies")
            for directory in POLICY_DIRS
        ]
        gfd = [document for document in yaml.safe_load_all(POLICIES) if isinstance(document, dict)]
        sets.append(PolicySet("gfd-cluster", _write(base / "gfd-cluster", gfd), cluster=True))
        singles = [(label, doc) for source, label in SINGLE_POLICY_SOURCES.items() for doc in _documents(ROOT / source)]
        singles += [("gfd", doc) for doc in gfd]
        for label, document in singles:
            everywhere = {**document, "spec": {**(document.get("spec") or {}), "namespaces": ["*"]}}
            name = f"everywhere-{label}-{document['metadata']['name']}"
            sets.append(PolicySet(name, _write(base / name, [everywhere]), cluster=True))
        yield sets


def cluster_view() -> Any:
    """The drift fixture's nodes, with the DRA fixture's slices and classes on them."""
    from tests.gfd_cluster import nodes
    from webhook.admission.cluster.devices import DraDevices
    from webhook.admission.cluster.nodes import ClusterView, NodeInfo
    from webhook.admission.cluster.slices import class_info, merge, sharing_of, slice_info, unread

    infos = {info.name: info for info in map(NodeInfo.from_object, nodes()) if info is not None}
    objects: list[dict[str, Any]] = []
    for name in ("resourceslice.yaml", "deviceclasses.yaml", "shared-deviceclasses.yaml"):
        text = (ROOT / "tests" / "fixtures" / "dra" / name).read_text(encoding="utf-8")
        objects += [obj for obj in yaml.safe_load_all(text) if isinstance(obj, dict)]
    read = dict(found for obj in objects if obj.get("kind") == "DeviceClass" if (found := class_info(obj)))
    held = [found[1] for obj in objects if obj.get("kind") == "ResourceSlice" if (found := slice_info(obj))]
    return ClusterView(merge(infos, held, read), unread(read), sharing_of(read), dra=DraDevices(held, read))


def _run(argv: list[str]) -> tuple[int, str, str]:
    from webhook.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def _offline_cluster(view: Any) -> Iterator[None]:
    """`check --cluster` reads `view` where it would list a cluster's nodes (the one I/O step replaced).

    Within one policy set, the work that is the same for every command is done once: the argparse tree is
    built once (main's `build_parser`), and the policy directory is loaded once (check's `load_policy_set`, the
    loader itself, its errors raised again each time). Every command still runs main's parse and check's
    evaluation and output."""
    from webhook.cli import check_cmd
    from webhook.cli import main as cli_main

    listed, build, load = check_cmd.cluster_view, cli_main.build_parser, check_cmd.load_policy_set
    parser = build()
    loaded: dict[Any, Any] = {}

    def load_once(source: Any, *rest: Any) -> Any:
        if source not in loaded:
            loaded[source] = load(source, *rest)
        return loaded[source]

    check_cmd.cluster_view = lambda kubeconfig, context: view  # type: ignore[assignment]
    cli_main.build_parser = lambda: parser  # type: ignore[assignment]
    check_cmd.load_policy_set = load_once  # type: ignore[assignment]
    try:
        yield
    finally:
        check_cmd.cluster_view, cli_main.build_parser, check_cmd.load_policy_set = listed, build, load


def record(policy_set: PolicySet, paths: list[str], view: Any) -> str:
    """The record of one policy set: per manifest and command, the exit code, stdout and stderr."""
    policies = str(policy_set.directory)
    shown = os.path.relpath(policies, ROOT) if policy_set.directory.is_relative_to(ROOT) else POLICY_DIR_MARK
    runs = [(["-o", "json"], False), (["--diff"], False)]
    if policy_set.cluster:
        runs += [(["--cluster", "-o", "json"], True), (["--cluster", "--diff"], True)]
    parts = []
    cwd = os.getcwd()
    os.chdir(ROOT)
    environ = {key: os.environ.pop(key) for key in ("NO_COLOR", "GPU_ADMISSION_POLICIES") if key in os.environ}
    try:
        with _offline_cluster(view):
            for path in paths:
                for options, _ in runs:
                    argv = ["check", "--policies", policies, *options, path]
                    code, out, err = _run(argv)
                    command = " ".join(["check", "--policies", shown, *options, path])
                    parts.append(f"=== {command}\nexit {code}\n--- stdout\n{out}--- stderr\n{err}")
    finally:
        os.chdir(cwd)
        os.environ.update(environ)
    return "".join(parts).replace(policies, shown)


def recorded(policy_set: PolicySet) -> Path:
    return RECORD / f"{policy_set.name}.txt"


def main() -> int:
    """Rewrite the record from the code as it is now."""
    RECORD.mkdir(parents=True, exist_ok=True)
    for stale in RECORD.glob("*.txt"):
        stale.unlink()
    view = cluster_view()
    paths = manifests()
    with policy_sets() as sets:
        for policy_set in sets:
            recorded(policy_set).write_text(record(policy_set, paths, view), encoding="utf-8")
            print(f"{recorded(policy_set).relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
