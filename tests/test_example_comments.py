"""The examples' comments say what the webhook does to them: the policy files they name exist, and the resource
a comment says a request becomes is the one the engine makes of it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from webhook.admission.engine import evaluate
from webhook.admission.policy.loader import load_policies

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _comments(path: Path) -> str:
    return " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))


def test_every_policy_file_an_example_names_exists() -> None:
    named = 0
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for reference in re.findall(r"(?<![\w/])((?:examples/)?policies/[\w.-]+\.yaml)", _comments(path)):
            assert (ROOT / reference).is_file(), f"{path.name} names {reference}, which does not exist"
            named += 1
    assert named >= 3


def test_the_cronjobs_comment_names_the_slice_it_becomes() -> None:
    path = EXAMPLES / "cronjob.yaml"
    cronjob = yaml.safe_load(path.read_text())
    decision = evaluate(cronjob, cronjob["metadata"]["namespace"], load_policies(str(EXAMPLES / "policies")))
    container = decision.mutated["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    (resource,) = container["resources"]["limits"]
    assert resource == "nvidia.com/mig-2g.20gb"
    assert re.findall(r"nvidia\.com/mig-\d+g\.\d+gb", _comments(path)) == [resource]
