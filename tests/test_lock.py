"""The lock files agree with pyproject.toml: every dependency it names is pinned, with hashes, and the pin is in
its range. A dependency added to pyproject.toml without `make lock` fails here by name, not as an ImportError
somewhere in the suite."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$", re.MULTILINE)


def pins(lock: str) -> dict[str, str]:
    text = (ROOT / "requirements" / lock).read_text()
    found = {canonicalize_name(name): version for name, version in PIN.findall(text)}
    hashes = text.count("--hash=sha256:")
    assert len(found) == text.count("==") and hashes >= len(found), f"{lock}: a pin without hashes"
    return found


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        ("runtime.txt", PROJECT["dependencies"]),
        ("test.txt", PROJECT["dependencies"] + PROJECT["optional-dependencies"]["test"]),
    ],
)
def test_every_dependency_is_pinned_within_its_range(lock: str, requirements: list[str]) -> None:
    pinned = pins(lock)
    for line in requirements:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock} lacks {requirement.name}: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock} pins {requirement.name} {pinned[name]}, outside {requirement.specifier}: run `make lock`"
        )
