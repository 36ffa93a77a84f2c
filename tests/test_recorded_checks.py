"""No change of behaviour unless meant: `check -o json` and `check --diff` (and with `--cluster`) of every
manifest fixture under every policy set give, byte for byte, what tests/fixtures/recorded/ holds
(tests/recorded_checks.py wrote it, and says how to rewrite it when a change is meant)."""

from __future__ import annotations

import difflib

import pytest

from tests.recorded_checks import RECORD, cluster_view, manifests, policy_sets, record, recorded

with policy_sets() as SETS:
    NAMES = [policy_set.name for policy_set in SETS]


def test_the_record_holds_every_policy_set_and_no_other():
    assert sorted(path.stem for path in RECORD.glob("*.txt")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_decisions_are_the_recorded_ones(name):
    with policy_sets() as sets:
        (policy_set,) = [each for each in sets if each.name == name]
        now = record(policy_set, manifests(), cluster_view())
    before = recorded(policy_set).read_text(encoding="utf-8")
    if now != before:
        diff = difflib.unified_diff(before.splitlines(), now.splitlines(), "recorded", "now", lineterm="", n=2)
        pytest.fail(f"{name}: the decisions changed:\n" + "\n".join(list(diff)[:80]))
