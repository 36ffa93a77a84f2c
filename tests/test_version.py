"""The version is written once, in pyproject.toml: the Makefile reads it from there (`make image` passes it to
the Containerfile), and every other place that has to spell it out is held equal to it here, so that a release
changes one line and this test names the ones it forgot."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import webhook

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def _read(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def test_the_package_says_the_projects_version():
    assert webhook.__version__ == VERSION


def test_the_chart_says_the_projects_version():
    chart = yaml.safe_load(_read("charts/gpu-admission/Chart.yaml"))
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)


def test_the_containerfile_default_is_the_projects_version():
    """`make image` passes VERSION from pyproject.toml; the default is for a plain `docker build`."""
    assert re.findall(r"^ARG VERSION=(\S+)$", _read("Containerfile"), re.M) == [VERSION]
    assert "sed -n 's/^version = " in _read("Makefile")  # the Makefile reads pyproject.toml, not a copy


def test_the_shipped_image_tags_are_the_projects_version():
    deployment = _read("manifests/base/deployment.yaml")
    assert re.findall(r"image: \S+:(\S+)", deployment) == [VERSION]
    assert re.findall(r"newTag: (\S+)", _read("manifests/overlays/custom/kustomization.yaml")) == [VERSION]


def test_the_docs_show_the_projects_version():
    for path in ("README.md", "docs/operations.md"):
        shown = set(re.findall(r"gpu-admission:(\d+\.\d+\.\d+)", _read(path)))
        assert shown <= {VERSION}, path
