"""The status a GPUPolicy object's verdict gives it (webhook/server/policy_status.py), without a server."""

from __future__ import annotations

from typing import Any

from webhook.admission.policy.objects import judge_objects
from webhook.server.policy_status import MESSAGE_MAX, matched_namespaces, status_of


def gpu_policy(name: str, namespaces: list[str], created: str, **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, "generation": 3, "creationTimestamp": created}
    return {"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": metadata,
            "spec": {"namespaces": namespaces, **spec}}  # fmt: skip


JUDGED = judge_objects([
    gpu_policy("teams", ["team-*"], "2026-01-01T00:00:00Z", enforcement="warn"),
    gpu_policy("ml", ["team-ml"], "2026-01-01T00:00:01Z", sharing={"mode": "time-slicing", "replicas": 4}),
    gpu_policy("bad", ["team-x"], "2026-01-01T00:00:02Z", **{f"field{n}": n for n in range(200)}),
])  # fmt: skip


def test_namespaces_go_to_the_policy_select_chooses():
    found = matched_namespaces(JUDGED.policies, ["team-ml", "team-b", "team-a", "team-x", "other"])
    assert found == {"ml": ["team-ml"], "teams": ["team-a", "team-b", "team-x"]}


def test_a_served_policy_says_what_it_serves():
    status = status_of(JUDGED.verdicts["ml"], ["team-ml"], None, "2026-02-02T00:00:00Z")
    assert status == {
        "observedGeneration": 3, "mode": "time-slicing", "enforcement": "enforce", "quota": "deny",
        "matchedNamespaces": 1, "namespaces": ["team-ml"],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Served", "message": "serving 1 namespace",
                        "observedGeneration": 3, "lastTransitionTime": "2026-02-02T00:00:00Z"}],
    }  # fmt: skip


def test_the_first_ten_namespaces_are_shown_and_all_counted():
    names = [f"team-{n:02d}" for n in range(25)]
    status = status_of(JUDGED.verdicts["teams"], names, None, "2026-02-02T00:00:00Z")
    assert status["matchedNamespaces"] == 25 and status["namespaces"] == names[:10]


def test_a_refused_policy_says_why_within_bounds():
    status = status_of(JUDGED.verdicts["bad"], ["team-x"], None, "2026-02-02T00:00:00Z")
    condition = status["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "Invalid")
    assert condition["message"].startswith("gpupolicy/bad spec.field0: unknown field")
    assert len(condition["message"]) == MESSAGE_MAX
    assert status["matchedNamespaces"] == 0 and status["namespaces"] == [] and "mode" not in status


def test_the_transition_time_moves_only_when_ready_flips():
    before = status_of(JUDGED.verdicts["ml"], ["team-ml"], None, "2026-02-02T00:00:00Z")
    same = status_of(JUDGED.verdicts["ml"], ["team-ml"], before, "2026-03-03T00:00:00Z")
    assert same == before  # nothing to write
    flipped = status_of(JUDGED.verdicts["bad"], [], before, "2026-03-03T00:00:00Z")
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-03-03T00:00:00Z"
