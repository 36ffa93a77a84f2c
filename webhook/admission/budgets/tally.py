"""Namespaces' GPU budgets summed in memory, pod after pod: what `gpu-webhook check` judges its input against.

Offline there is no API server to hold the use: the pods of the input are judged in order, and each one
admitted counts for the next, with the same rule as the server (budget.judge). A ResourceClaim that several
pods name is held once: a pod that names a claim already counted is judged as if that claim's share were
free to it. Pure data, no I/O; the server keeps its own ledger in the API server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.admission.budgets.budget import PodAsk, Usage
from webhook.admission.cluster.quota import GpuQuota


@dataclass(slots=True)
class Tally:
    """The GPU quotas of each namespace and what the pods admitted so far hold against each."""

    quotas: dict[str, list[GpuQuota]] = field(default_factory=dict)
    used: dict[tuple[str, str], Fraction] = field(default_factory=dict)  # (namespace, quota) -> held
    claims: dict[tuple[str, str], dict[str, Fraction]] = field(default_factory=dict)  # -> claim -> its share

    def add(self, quota: GpuQuota) -> None:
        """Keep a quota (a later one of the same name in the same namespace replaces it, as an apply would)."""
        held = self.quotas.setdefault(quota.namespace, [])
        held[:] = [q for q in held if q.name != quota.name] + [quota]
        self.used.setdefault((quota.namespace, quota.name), Fraction(0))

    def usages(self, namespace: str, pod: dict[str, Any]) -> list[Usage] | None:
        """The namespace's quotas with what each holds, for judging `pod`: the claims it names that are already
        counted left out; None where the namespace has no GPU quota."""
        quotas = self.quotas.get(namespace)
        if not quotas:
            return None
        named = _named_claims(pod)
        found = []
        for quota in quotas:
            key = (namespace, quota.name)
            counted = self.claims.get(key, {})
            shared = sum((counted[name] for name in named if name in counted), Fraction(0))
            found.append(Usage(quota, self.used[key] - shared))
        return found

    def admit(self, namespace: str, pod: dict[str, Any], ask: PodAsk) -> None:
        """Count an admitted pod against every quota of its namespace that counts it."""
        for quota in self.quotas.get(namespace, []):
            if not quota.counts(pod):
                continue
            key = (namespace, quota.name)
            counted = self.claims.setdefault(key, {})
            held = ask.total
            for name, share in ask.claims:
                if name in counted:
                    held -= share
                else:
                    counted[name] = share
            self.used[key] += held


def _named_claims(pod: dict[str, Any]) -> set[str]:
    spec = pod.get("spec") if type(pod) is dict else None
    entries = spec.get("resourceClaims") if type(spec) is dict else None
    names = set()
    for entry in entries if type(entries) is list else []:
        name = entry.get("resourceClaimName") if type(entry) is dict else None
        if type(name) is str and name:
            names.add(name)
    return names
