"""Builders shared by the engine's tests: short, readable pods and policies."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from tests import evanphx
from webhook.admission.engine import Decision, evaluate
from webhook.admission.policy.model import (
    GPU,
    Enforcement,
    Fractional,
    Limits,
    Mode,
    Policy,
    PolicySet,
    Sharing,
)

NS = "team"


def container(name: str = "app", requests: dict | None = None, limits: dict | None = None, env=None, **extra):
    body: dict[str, Any] = {"name": name, "image": "registry.example/app:1"}
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        body["resources"] = resources
    if env is not None:
        body["env"] = env
    body.update(extra)
    return body


def pod(*containers: dict, init: tuple[dict, ...] = (), name: str = "p", **spec_extra) -> dict:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def policy(name: str = "team", **fields: Any) -> Policy:
    return Policy(name=name, namespaces=(NS,), **fields)


EXCLUSIVE = policy()
TIME_SLICING = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4))
TIME_SLICING_FRACTIONAL = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), fractional=Fractional.SHARED)
MPS = policy(sharing=Sharing(mode=Mode.MPS, replicas=4), gpu=GPU(model="A100-80GB"))
MIG = policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB"))
MIG_FRACTIONAL = policy(
    sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=GPU(model="A100-80GB"), fractional=Fractional.MIG
)


def run(obj: dict, pol: Policy = EXCLUSIVE, namespace: str = NS) -> Decision:
    """Evaluate, and check what must hold for every review: the patch, applied the way the API server
    applies it, gives the mutated object; the input is untouched; a second pass changes nothing."""
    original = copy.deepcopy(obj)
    policies = PolicySet((pol,))
    decision = evaluate(obj, namespace, policies)
    assert obj == original, "the engine changed its input"
    assert evanphx.apply(obj, decision.patch) == decision.mutated
    again = evaluate(decision.mutated, namespace, policies)
    assert again.patch == [], f"not idempotent: {again.patch}"
    assert again.verdict == decision.verdict
    return decision


def env_of(decision: Decision, index: int = 0) -> dict[str, str]:
    spec = decision.mutated["spec"]
    return {e["name"]: e.get("value") for e in spec["containers"][index].get("env", [])}


__all__ = [
    "GPU",
    "MIG",
    "MIG_FRACTIONAL",
    "MPS",
    "NS",
    "TIME_SLICING",
    "TIME_SLICING_FRACTIONAL",
    "Enforcement",
    "Fraction",
    "Fractional",
    "Limits",
    "Mode",
    "Sharing",
    "container",
    "env_of",
    "pod",
    "policy",
    "run",
]
