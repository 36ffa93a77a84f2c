"""Limits from requests, in every mode: a managed resource requested without a limit gets its request as the
limit (mutate.py step 1), since the API server refuses an extended resource's request without an equal limit.

The managed names are known in advance and get one operation each. The names judged by prefix (a MIG profile,
Intel's devices and amounts, a DeviceClass's resource) are not: their operations are made from the container's
own keys. A list of lists would need `flatten` (Kubernetes 1.34's CEL, which a 1.34 API server does not serve to
new expressions: it compiles them at 1.33), so each container's operations are written as text, joined, and
split into one list: a resource name holds no space or comma (the API server refuses one that does), and a
quantity's canonical text neither.
"""

from __future__ import annotations

from webhook.admission.base.resources import MANAGED_NAMES, MANAGED_PREFIXES
from webhook.admission.native.cel import bind, jsonpatch, lit, strings
from webhook.admission.native.containers import by_prefix, each_of, found_once, has_map, holds, path, value
from webhook.admission.native.family import SECTIONS, Family, Mutation
from webhook.admission.policy.model import Policy

assert not any(name.startswith(MANAGED_PREFIXES) for name in MANAGED_NAMES)  # each copied once

# What never appears in a resource name the API server accepts, nor in a quantity's canonical text: between
# two operations, and between an operation's path and its value.
BETWEEN_OPERATIONS, BEFORE_VALUE = " ", ","


class LimitsFromRequests(Family):
    name = "limits from requests"

    def mutations(self, policy: Policy) -> list[Mutation]:
        return [Mutation("limits from requests", _copied())]


def copyable(name: str) -> bool:
    """Whether the MAP copies a limit of the resource `name` from its request: it holds neither separator (every
    name the API server accepts)."""
    return BETWEEN_OPERATIONS not in name and BEFORE_VALUE not in name


def _copyable(key: str) -> str:
    """CEL of `copyable`."""
    return f"!{key}.contains({lit(BETWEEN_OPERATIONS)}) && !{key}.contains({lit(BEFORE_VALUE)})"


def _copied() -> str:
    parts = []
    # The keys of `c`'s requests judged by prefix without a limit, which the webhook copies.
    missing = (
        f"c.resources.requests.filter(k, ({by_prefix('k')}) && {_copyable('k')} && "
        f"!({has_map('limits')} && k in c.resources.limits))"
    )
    for section in SECTIONS:
        # A container with requests and no limits map gets an empty one first: JSON Patch adds into a map.
        needs_map = (
            f"!has(c.resources.limits) && ({strings(MANAGED_NAMES)}.exists(n, n in c.resources.requests) || "
            f"c.resources.requests.exists(k, ({by_prefix('k')}) && {_copyable('k')}))"
        )
        ops = [each_of("asking", needs_map, jsonpatch("add", path(section, "/resources/limits"), "{}"))]
        for name in MANAGED_NAMES:
            missing_name = f"{lit(name)} in c.resources.requests && !({holds('limits', name)})"
            target = f"{path(section, '/resources/limits/')} + jsonpatch.escapeKey({lit(name)})"
            ops.append(each_of("asking", missing_name, jsonpatch("add", target, value("requests", name))))
        # Each operation as text: the key's JSON Pointer, BEFORE_VALUE, its request; the container's place found
        # once, not per key (a third iteration). A container with none gives '', an empty operation, dropped.
        operation = f"limitsAt + jsonpatch.escapeKey(k) + {lit(BEFORE_VALUE)} + string(c.resources.requests[k])"
        operations = f"{missing}.map(k, {operation}).join({lit(BETWEEN_OPERATIONS)})"
        texts = each_of("asking", "true", bind(path(section, "/resources/limits/"), "limitsAt", operations))
        split = f"{texts}.join({lit(BETWEEN_OPERATIONS)}).split({lit(BETWEEN_OPERATIONS)})"
        pair = f"o.split({lit(BEFORE_VALUE)})"
        ops.append(f"{split}.filter(o, o != '').map(o, {jsonpatch('add', f'{pair}[0]', f'{pair}[1]')})")
        # the containers that ask for anything found once for all the operations
        parts.append(found_once(section, has_map("requests"), "asking", " + ".join(ops)))
    return " + ".join(parts)
