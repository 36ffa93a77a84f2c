"""Limits from requests, in every mode: a managed resource requested without a limit gets its request as the
limit (mutate.py step 1), since the API server refuses an extended resource's request without an equal limit."""

from __future__ import annotations

from webhook.admission.base.resources import MANAGED_NAMES
from webhook.admission.native.cel import jsonpatch, lit, strings
from webhook.admission.native.containers import each, has_map, holds, path, value
from webhook.admission.native.family import SECTIONS, Family, Mutation
from webhook.admission.policy.model import Policy


class LimitsFromRequests(Family):
    name = "limits from requests"

    def mutations(self, policy: Policy) -> list[Mutation]:
        parts = []
        for section in SECTIONS:
            # A container with requests and no limits map gets an empty one first: JSON Patch adds into a map.
            needs_map = (
                f"{has_map('requests')} && !has(c.resources.limits) && "
                f"{strings(MANAGED_NAMES)}.exists(n, n in c.resources.requests)"
            )
            parts.append(each(section, needs_map, jsonpatch("add", path(section, "/resources/limits"), "{}")))
            for name in MANAGED_NAMES:
                missing = f"{holds('requests', name)} && !({holds('limits', name)})"
                target = f"{path(section, '/resources/limits/')} + jsonpatch.escapeKey({lit(name)})"
                parts.append(each(section, missing, jsonpatch("add", target, value("requests", name))))
        return [Mutation("limits from requests", " + ".join(parts))]
