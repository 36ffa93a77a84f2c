"""What one rule family gives the compiled set: the interface every family implements (registry.py lists them).

A family reads a policy and answers four questions, each with a default of nothing: the JSON Patch mutations
it adds to the policy's MutatingAdmissionPolicy (in order: one MAP per policy, since separate MAPs have no
order), the denial lines it adds to the policy's ValidatingAdmissionPolicy about each container and about the
pod, and what of its rule it cannot compile (`Gap`), said on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.admission.policy.model import Policy

# The sections whose containers hold resources (podspec.MUTATED_SECTIONS), in the order validation reads them.
SECTIONS = ("initContainers", "containers")


@dataclass(frozen=True, slots=True)
class Gap:
    """A rule the native set does not carry, and why: printed on stderr, and the reason a test case is not
    compared."""

    rule: str
    why: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.why}"


@dataclass(frozen=True, slots=True)
class Mutation:
    """One `patchType: JSONPatch` mutation: a CEL expression that gives a list of operations."""

    step: str  # what it does, for the comment and the tests
    expression: str


@dataclass(frozen=True, slots=True)
class Lines:
    """Denial lines: `variables` (name, expression) evaluated first, then `lines`, a CEL list of strings, each
    one line of the webhook's denial for the same object."""

    lines: str
    variables: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ContainerRule:
    """One line validation may say of a container: when (`condition`, on the container `c`) and what (`sentence`,
    a CEL string, without the container's label). A container's lines are said together, in the registry's
    order, as validation says them."""

    condition: str
    sentence: str
    many: bool = False  # `sentence` is a CEL list of sentences, each a line (one per mount, say); it may be empty
    # where `condition` holds (a condition that says exactly when is as long as the list): the compiler keeps no
    # empty line


class Family:
    """One family of rules. Override what the family has."""

    name: str = ""

    def mutations(self, policy: Policy) -> list[Mutation]:
        return []

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        return []

    def lines(self, policy: Policy) -> list[Lines]:
        """Lines about the pod as a whole, after every container's."""
        return []

    def gaps(self, policy: Policy) -> list[Gap]:
        return []
