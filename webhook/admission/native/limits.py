"""Limits from requests, in every mode: a managed resource requested without a limit gets its request as the
limit (mutate.py step 1), since the API server refuses an extended resource's request without an equal limit.
The names are known in advance: the managed names, and a MIG policy's slices (migslices.slice_names), copied
by a second mutation of their own (the same step: the names are apart)."""

from __future__ import annotations

from collections.abc import Sequence

from webhook.admission.base.resources import MANAGED_NAMES
from webhook.admission.native.cel import jsonpatch, lit, strings
from webhook.admission.native.containers import each, has_map, holds, path, value
from webhook.admission.native.family import SECTIONS, Family, Mutation
from webhook.admission.native.migslices import slice_names
from webhook.admission.policy.model import Policy


class LimitsFromRequests(Family):
    name = "limits from requests"

    def mutations(self, policy: Policy) -> list[Mutation]:
        found = [Mutation("limits from requests", _copied(MANAGED_NAMES))]
        slices = slice_names(policy)
        if slices:
            found.append(Mutation("limits of the MIG slices from requests", _copied(slices)))
        return found


def _copied(names: Sequence[str]) -> str:
    parts = []
    for section in SECTIONS:
        # A container with requests and no limits map gets an empty one first: JSON Patch adds into a map.
        needs_map = (
            f"{has_map('requests')} && !has(c.resources.limits) && "
            f"{strings(names)}.exists(n, n in c.resources.requests)"
        )
        parts.append(each(section, needs_map, jsonpatch("add", path(section, "/resources/limits"), "{}")))
        for name in names:
            missing = f"{holds('requests', name)} && !({holds('limits', name)})"
            target = f"{path(section, '/resources/limits/')} + jsonpatch.escapeKey({lit(name)})"
            parts.append(each(section, missing, jsonpatch("add", target, value("requests", name))))
    return " + ".join(parts)
