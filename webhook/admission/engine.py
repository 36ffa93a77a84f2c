"""The one entry point of the admission decision: `evaluate(obj, namespace, policies)`.

The server's /mutate and /validate, the CLI's check and audit, and the tests all call this, so every rule
lives once: mutate (mutate.py, which also builds the JSON Patch through patch.py), then validate the result
(validate.py), then turn the policy's enforcement into a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.admission.mutate import WARNING_PREFIX, mutate
from webhook.admission.podspec import mentions_gpu, pod_spec_path
from webhook.admission.policy import Enforcement, PolicySet
from webhook.admission.validate import validate


@dataclass(slots=True)
class Decision:
    """What the webhook decides for one object (built once per review; treat it as read-only)."""

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
    """Mutate then validate `obj` (a Pod, a workload or a PodTemplate) under `namespace`'s policy.

    Templates are validated on the mutation result too: their pods will be mutated when created.
    """
    policy = policies.for_namespace(namespace)
    spec_path = pod_spec_path(obj)
    if spec_path is None:
        return Decision(True, "allow", policy.name, mutated=obj, skipped=True)
    if not mentions_gpu(obj, spec_path):
        return Decision(True, "allow", policy.name, mutated=obj)
    result = mutate(obj, policy, spec_path)
    violations = validate(result.obj, policy, spec_path)
    warnings = result.warnings
    if not violations:
        verdict = "allow"
    elif policy.enforcement is Enforcement.ENFORCE:
        verdict = "deny"
    elif policy.enforcement is Enforcement.WARN:
        verdict = "warn"
        # Whole lines here (the CLI shows them whole); the server cuts each to 120 characters on the way out.
        warnings = warnings + [WARNING_PREFIX + line for line in violations]
    else:
        verdict = "audit"
    return Decision(
        allowed=verdict != "deny",
        decision=verdict,
        policy=policy.name,
        patch=result.patch,
        warnings=warnings,
        violations=violations,
        mutated=result.obj,
        mutation_kinds=result.kinds,
    )
