"""Which namespaces a compiled policy is for: `PolicySet.select`'s rule as a matchCondition on
`request.namespace` (`namespaceObject` is null in matchConditions): an exact name first, then the glob with the
most literal characters, file order on ties (the set's own ranking, `selection_order`), each glob an anchored
regular expression from the project's glob code; the built-in defaults where nothing matches."""

from __future__ import annotations

from webhook.admission.native.cel import strings
from webhook.admission.policy.globs import glob_regex
from webhook.admission.policy.model import Policy, PolicySet

NAMESPACE = "request.namespace"


def selects(policies: PolicySet, policy: Policy | None) -> str:
    """The condition under which `policy` is the namespace's (None: the built-in defaults)."""
    order = policies.selection_order()
    exact = [name for name, _, literals in order if literals is None]
    globs = [(glob_regex(pattern), owner) for pattern, owner, literals in order if literals is not None]
    not_named = f"!({NAMESPACE} in {strings(exact)})" if exact else "true"
    if policy is None:
        if not globs:
            return not_named
        return f"{not_named} && !{strings(r for r, _ in globs)}.exists(r, {NAMESPACE}.matches(r))"
    terms = []
    own = [name for name, owner, literals in order if literals is None and owner is policy]
    if own:
        terms.append(f"{NAMESPACE} in {strings(own)}")
    for rank, (regex, owner) in enumerate(globs):
        if owner is not policy:
            continue
        earlier = [r for r, _ in globs[:rank]]
        first = f"{NAMESPACE}.matches({strings([regex])[1:-1]})"
        if earlier:
            first += f" && !{strings(earlier)}.exists(r, {NAMESPACE}.matches(r))"
        terms.append(f"{not_named} && {first}")
    return " || ".join(f"({term})" for term in terms) or "false"
