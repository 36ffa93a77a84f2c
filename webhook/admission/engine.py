"""The one entry point of the admission decision: `evaluate(obj, namespace, policies)`.

The server's /mutate and /validate, the CLI's check and audit, and the tests all call this, so every rule
lives once: mutate (mutate.py), then validate the result (validate.py), then diff into a JSON Patch (patch.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.admission.policy import PolicySet


@dataclass(frozen=True, slots=True)
class Decision:
    """What the webhook decides for one object."""

    allowed: bool
    decision: str  # "allow" | "deny" | "warn" | "audit": the metric and log label
    policy: str  # the name of the policy that applied
    patch: list[dict[str, Any]] = field(default_factory=list)  # RFC 6902, against the original object
    warnings: list[str] = field(default_factory=list)  # shown to the user (admission warnings)
    violations: list[str] = field(default_factory=list)  # validation's lines, whatever the enforcement
    mutated: dict[str, Any] = field(default_factory=dict)  # the object after mutation
    mutation_kinds: list[str] = field(default_factory=list)  # one entry per change, e.g. "requests-into-limits"
    skipped: bool = False  # the object has no pod spec: allowed untouched

    @property
    def mutated_any(self) -> bool:
        return bool(self.patch)

    @property
    def denials(self) -> list[str]:
        """The lines that deny the object: validation's, under `enforce` only."""
        return self.violations if self.decision == "deny" else []


def evaluate(obj: dict[str, Any], namespace: str, policies: PolicySet) -> Decision:
    """Mutate then validate `obj` (a Pod, a workload or a PodTemplate) under `namespace`'s policy."""
    raise NotImplementedError  # filled in by the engine work
