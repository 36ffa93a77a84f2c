"""The two container image builds tests/test_image.py runs, in one place: the plain `podman build .` of a fresh
copy of the tree, and the air-gapped build from `make wheels` with the package index closed.

Together they take about a minute, nearly all of it in podman and pip. Under xdist the controller starts them
in the background (`python -m tests.image_builds DIR`) as soon as a worker's collection shows an image test,
so they run beside the rest of the suite instead of holding a worker while it waits; the image tests' fixtures
then wait for the result files in DIR. Run without xdist, the fixtures build in place, as before.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("podman", "buildah", "mmdebstrap")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
BASE_IMAGE = "localhost/gpu-admission-test-base:bookworm-python3"
# What the base holds: the Python the host's wheels are built for must be the image's (3.11 in Debian 12).
DEBOOTSTRAP = ["mmdebstrap", "--variant=apt", "--include=python3,python3-venv,ca-certificates", "bookworm"]
# The host's CA certificates, for the package index from inside the build (pip reads PIP_CERT, which the
# Containerfile declares as a build argument).
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
CLOSED_INDEX = "http://127.0.0.1:9/simple"  # the discard port: nothing listens there
BUILDS = ("plain", "offline")
STARTED = "started"  # the file the controller writes in DIR once it has started the builds
WAIT_S = 1500.0  # the longest a fixture waits for a build started elsewhere (a first base image included)


class BuildFailed(AssertionError):
    pass


def run(*command: str, timeout: float = 600) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise BuildFailed(f"{' '.join(command)}: exit {result.returncode}\n{result.stderr[-4000:]}")
    return result.stdout


def tag_for(name: str, suffix: str) -> str:
    return f"localhost/gpu-admission:{'test' if name == 'plain' else 'offline'}-{suffix}"


def base_image(scratch: Path) -> str:
    """Debian 12 with python3, made once and kept: debootstrapping is the slow part (and the only download)."""
    if subprocess.run(["podman", "image", "exists", BASE_IMAGE]).returncode != 0:
        scratch.mkdir(parents=True, exist_ok=True)
        tarball = scratch / "bookworm.tar"
        run(*DEBOOTSTRAP, str(tarball), timeout=900)
        run("podman", "import", str(tarball), BASE_IMAGE)
        tarball.unlink()
    return BASE_IMAGE


def fresh_copy(destination: Path) -> Path:
    """What a fresh clone of this tree holds: the files git tracks, and those it would (untracked, not ignored)."""
    listed = run("git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def podman_build(context: Path, base: str, tag: str, *flags: str) -> None:
    # --layers=false: no intermediate images are kept (they would only pile up from run to run).
    run("podman", "build", "--isolation=chroot", "--layers=false", "--build-arg", f"BASE={base}",
        "--tag", tag, *flags, str(context))  # fmt: skip


def build_plain(scratch: Path, base: str, tag: str) -> str:
    """The plain build command in a fresh copy of the tree, on the Debian base: no host step before it."""
    context = fresh_copy(scratch / "clone")
    ca = [f"--volume={HOST_CA.parent}:{HOST_CA.parent}:ro", f"--build-arg=PIP_CERT={HOST_CA}"]
    podman_build(context, base, tag, *(ca if HOST_CA.exists() else []))
    return tag


def build_offline(scratch: Path, base: str, tag: str) -> str:
    """`make wheels` in a fresh copy of the tree, then the build stage with the index closed: the stage where
    the air-gapped path differs (the final one copies its venv, as in the plain build)."""
    context = fresh_copy(scratch / "offline")
    run("make", "-C", str(context), "wheels", f"PYTHON={sys.executable}")
    podman_build(context, base, tag, "--target=build", "--build-arg=PIP_NO_INDEX=1",
                 f"--build-arg=PIP_INDEX_URL={CLOSED_INDEX}")  # fmt: skip
    return tag


BUILDERS = {"plain": build_plain, "offline": build_offline}


def build_all(directory: Path) -> None:
    """Both builds at once, each one's result (its tag, or why it failed) written to DIR/NAME.json."""

    def one(name: str, base: str) -> None:
        try:
            answer = {"tag": BUILDERS[name](directory / name, base, tag_for(name, directory.name))}
        except Exception as error:  # written for the test that waits on it
            answer = {"error": f"{type(error).__name__}: {error}"}
        result(directory, name).write_text(json.dumps(answer))

    try:
        base = base_image(directory / "base")
    except Exception as error:
        for name in BUILDS:
            result(directory, name).write_text(json.dumps({"error": f"the base image: {error}"}))
        return
    with ThreadPoolExecutor(len(BUILDS)) as pool:
        list(pool.map(lambda name: one(name, base), BUILDS))


def result(directory: Path, name: str) -> Path:
    return directory / f"{name}.json"


def start(directory: Path) -> subprocess.Popen:
    """The builds in the background, in a process group of their own (stop() ends them with their children), at
    a lower CPU priority (nice 10, which podman and pip inherit): they take the time the tests leave idle rather
    than slowing the tests that measure a server's answers."""
    (directory / STARTED).touch()
    log = (directory / "builds.log").open("w")
    return subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-m", "tests.image_builds", str(directory)],
        cwd=ROOT, stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip


def started(directory: Path) -> bool:
    return (directory / STARTED).exists()


def wait(directory: Path, name: str) -> str:
    """The tag of a build started in the background, once it is done; its failure as this test's."""
    deadline = time.monotonic() + WAIT_S
    path = result(directory, name)
    while not path.exists():
        if time.monotonic() > deadline:
            log = directory / "builds.log"
            raise BuildFailed(f"the {name} image build did not finish in {WAIT_S:.0f} s: {log.read_text()[-4000:]}")
        time.sleep(0.5)
    answer = json.loads(path.read_text())
    if "error" in answer:
        raise BuildFailed(f"the {name} image build failed: {answer['error']}")
    return str(answer["tag"])


def stop(directory: Path, builder: subprocess.Popen | None) -> None:
    """End the builds if they still run, remove their images and DIR."""
    if builder is not None and builder.poll() is None:
        os.killpg(builder.pid, 9)
        builder.wait()
    for name in BUILDS:
        subprocess.run(["podman", "rmi", "--force", tag_for(name, directory.name)], capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    build_all(Path(sys.argv[1]))
