"""GPUPolicy objects, as the API server holds them, judged by the loader: one verdict per object, the set they serve.

The cluster source, the GPUPolicy admission review and the CLI's --from-cluster all go through
webhook/admission/policy/objects.py, so these are the rules all three follow.
"""

from __future__ import annotations

import copy
import dataclasses
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from webhook.admission.policy.loader import load_policies
from webhook.admission.policy.model import Mode, Policy
from webhook.admission.policy.objects import (
    document_of,
    is_policy_object,
    judge_objects,
    policy_text,
    review_object,
)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = (ROOT / "policies", ROOT / "examples" / "policies")


def policy(
    name: str, spec: dict[str, Any], created: str = "2026-01-01T00:00:00Z", generation: int = 1
) -> dict[str, Any]:
    """A GPUPolicy as the API server returns it: with server metadata and a status the loader must ignore."""
    return {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "GPUPolicy",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "42",
            "generation": generation,
            "creationTimestamp": created,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": {"observedGeneration": generation - 1},
    }


def shipped_objects() -> list[dict[str, Any]]:
    """Every document of every shipped policy file, as the object `kubectl apply -f` makes of it."""
    found = []
    for directory in SHIPPED:
        for path in sorted(directory.glob("*.yaml")):
            found += [document for document in yaml.safe_load_all(path.read_text()) if document]
    return found


def without_source(policy: Policy) -> Policy:
    return dataclasses.replace(policy, source="", memo={})


def test_the_shipped_files_as_objects_serve_the_same_policies_as_the_files() -> None:
    judged = judge_objects(shipped_objects())
    assert all(verdict.ready for verdict in judged.verdicts.values()), judged.verdicts
    from_files = {p.name: without_source(p) for d in SHIPPED for p in load_policies(d).policies}
    from_objects = {p.name: without_source(p) for p in judged.policies.policies}
    assert from_objects == from_files


def test_the_set_is_in_the_order_of_the_files_export_writes_and_names_each_object_as_kubectl_does() -> None:
    judged = judge_objects(shipped_objects())
    names = [p.name for p in judged.policies.policies]
    assert names == sorted(names, key=lambda name: f"{name}.yaml")
    assert {p.source for p in judged.policies.policies} == {f"gpupolicy/{name}" for name in names}


def test_server_metadata_and_status_are_not_the_policy() -> None:
    """uid, resourceVersion, managedFields, annotations and status are the API server's: never 'unknown fields'."""
    judged = judge_objects([policy("a", {"namespaces": ["a"]})])
    assert judged.verdicts["a"].ready
    assert document_of(policy("a", {"namespaces": ["a"]})) == {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "GPUPolicy",
        "metadata": {"name": "a"},
        "spec": {"namespaces": ["a"]},
    }


def test_a_json_number_is_exact_as_a_files_number_is() -> None:
    spec = {"namespaces": ["a"], "sharing": {"mode": "time-slicing", "replicas": 10}, "memoryFraction": 0.1}
    served = judge_objects([policy("a", spec)]).policies.policies[0]
    assert served.memory_fraction == Fraction(1, 10)


def test_export_text_reads_back_as_the_same_object() -> None:
    obj = policy("a", {"namespaces": ["a", "b-*"], "sharing": {"mode": "mps", "replicas": 4}, "memoryFraction": 0.25})
    assert yaml.safe_load(policy_text(obj)) == document_of(obj)


def test_a_bad_object_is_not_served_and_says_why_in_the_loaders_words() -> None:
    good = policy("good", {"namespaces": ["a"]})
    bad = policy("bad", {"namespaces": ["b"], "sharing": {"mdoe": "mps"}, "limits": {"maxPerPod": 0}})
    judged = judge_objects([good, bad])
    assert [p.name for p in judged.policies.policies] == ["good"]
    assert judged.verdicts["good"].ready
    assert judged.verdicts["bad"].problems == (
        'gpupolicy/bad spec.sharing.mdoe: unknown field (did you mean "mode"?)',
        "gpupolicy/bad spec.limits.maxPerPod: 0 is too small; a pod may hold at least 1 GPU",
    )
    assert judged.verdicts["bad"].policy is None
    assert judged.policies.select("b").policy.name == "built-in-default"  # the bad one claims nothing


def test_the_policy_created_first_keeps_a_contested_namespace() -> None:
    older = policy("zeta", {"namespaces": ["team-a"]}, created="2026-01-01T00:00:00Z")
    newer = policy("alpha", {"namespaces": ["team-a", "team-b"]}, created="2026-02-01T00:00:00Z")
    judged = judge_objects([newer, older])
    assert judged.verdicts["zeta"].ready
    assert judged.verdicts["alpha"].problems == (
        'gpupolicy/alpha spec.namespaces[0]: namespace "team-a" is listed by both policy "zeta" (gpupolicy/zeta) '
        'and policy "alpha" (gpupolicy/alpha); keep it in one of them',
    )
    assert judged.policies.select("team-a").policy.name == "zeta"
    assert judged.policies.select("team-b").policy.name == "built-in-default"  # alpha serves none of its namespaces


def test_steering_is_decided_over_the_served_set() -> None:
    """`auto` steering of a whole-GPU policy depends on the others (a MIG single pool keeps nvidia.com/gpu)."""
    whole = policy("whole", {"namespaces": ["w"]})
    mig = {"mode": "mig", "migStrategy": "single", "migProfile": "1g.10gb"}
    single = policy("single", {"namespaces": ["m"], "sharing": mig, "gpu": {"model": "A100-80GB"}})
    alone = judge_objects([whole]).verdicts["whole"].policy
    together = judge_objects([whole, single]).verdicts["whole"].policy
    assert alone is not None and together is not None
    assert not alone.steering and together.steering


def test_malformed_objects_get_lines_not_tracebacks() -> None:
    judged = judge_objects(
        [
            {"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": "nospec"}},
            {"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": "list"}, "spec": [1]},
            {"apiVersion": "gpu-admission.io/v2", "kind": "GPUPolicy", "metadata": {"name": "v2"}, "spec": {}},
        ]
    )
    assert judged.policies.policies == ()
    assert judged.verdicts["nospec"].problems == (
        "gpupolicy/nospec spec: required; a policy needs at least spec.namespaces",
    )
    assert judged.verdicts["list"].problems[0].startswith("gpupolicy/list spec: expected a mapping of ")
    assert judged.verdicts["v2"].problems[0] == (
        'gpupolicy/v2 apiVersion: "gpu-admission.io/v2" is not supported; use gpu-admission.io/v1'
    )


class TestReview:
    """A GPUPolicy CREATE or UPDATE, judged among the objects stored now."""

    stored = [
        policy("notebooks", {"namespaces": ["notebooks", "notebook-*"]}, created="2026-01-01T00:00:00Z"),
        policy("broken", {"namespaces": ["x"], "enforcement": "enforced"}, created="2026-01-02T00:00:00Z"),
    ]

    def test_a_good_policy_is_allowed(self) -> None:
        assert review_object(policy("batch", {"namespaces": ["batch"]}), self.stored) == ()

    def test_a_wrong_field_is_refused_with_the_loaders_line(self) -> None:
        candidate = policy("batch", {"namespaces": ["batch"], "sharing": {"mode": "time-slicing", "replicas": 0}})
        assert review_object(candidate, self.stored) == (
            "gpupolicy/batch spec.sharing.replicas: 0 is too small; time-slicing and mps share each GPU as at least "
            "2 replicas",
        )

    def test_a_namespace_held_by_a_stored_policy_is_refused_even_to_an_older_object(self) -> None:
        """An UPDATE of an object created before the holder still may not take its namespace."""
        candidate = policy("early", {"namespaces": ["notebooks"]}, created="2025-01-01T00:00:00Z")
        problems = review_object(candidate, self.stored)
        assert len(problems) == 1 and 'is listed by both policy "notebooks"' in problems[0]

    def test_an_update_replaces_its_own_stored_version(self) -> None:
        changed = copy.deepcopy(self.stored[0])
        changed["spec"]["namespaces"] = ["notebooks"]
        assert review_object(changed, self.stored) == ()

    def test_a_stored_object_that_fails_claims_nothing(self) -> None:
        assert review_object(policy("x", {"namespaces": ["x"]}), self.stored) == ()


def test_is_policy_object() -> None:
    assert is_policy_object(policy("a", {}))
    assert not is_policy_object({"apiVersion": "v1", "kind": "ConfigMap"})
    assert not is_policy_object({"apiVersion": "example.com/v1", "kind": "GPUPolicy"})


def test_a_single_object_never_selects_by_chance_on_mode() -> None:
    """The mode of a served object is the one written (a JSON string), defaults filled as for a file."""
    served = judge_objects([policy("a", {"namespaces": ["a"]})]).policies.policies[0]
    assert served.sharing.mode is Mode.EXCLUSIVE
