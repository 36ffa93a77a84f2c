"""YAML as the tests read it: with libyaml's parser, which PyYAML's wheels carry. The generated manifests and
native policies are long, and the pure-Python parser took about a tenth of the suite's time on them; what is
read is the same (both are PyYAML's safe loader)."""

from __future__ import annotations

from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    return yaml.load(text, Loader=LOADER)


def load_all(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=LOADER))
