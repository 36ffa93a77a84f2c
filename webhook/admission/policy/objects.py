"""GPUPolicy objects, as the API server holds them, judged by the loader: the set they make and each one's verdict.

The cluster source (`serve --policy-source cluster`), the GPUPolicy admission review and the CLI's
`--from-cluster` all read objects through here, so an object is judged exactly as the same policy in a file
is: its document (apiVersion, kind, metadata.name, spec; never status or the API server's metadata) is
written as YAML and read by the loader, numbers included (a JSON 0.1 is the exact 1/10 a file's 0.1 is).

Objects are judged one by one: a bad object is not served and its status says why, while the others are. Where
two claim the same namespace or glob, the one created first keeps it. The set is in the order the same policies
have as files named after them (NAME.yaml, as `policy export` writes them), so a glob tie falls the same way in
both. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from webhook.admission.policy.loader import judge_sources
from webhook.admission.policy.model import Policy, PolicySet
from webhook.admission.policy.policyfields import API_VERSION, KIND

GROUP, _, VERSION = API_VERSION.partition("/")
PLURAL = "gpupolicies"
RESOURCE = f"{PLURAL}.{GROUP}"  # the CustomResourceDefinition's name
SOURCE_PREFIX = "gpupolicy/"  # how messages name an object: gpupolicy/<name>, as kubectl does


@dataclass(frozen=True, slots=True)
class Verdict:
    """One object's judgment: served (no problems) or not, with the loader's lines."""

    name: str
    generation: int
    problems: tuple[str, ...]
    policy: Policy | None  # the policy served, None where it is not

    @property
    def ready(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True)
class JudgedPolicies:
    """What a set of objects serves, and the verdict on each object by name."""

    policies: PolicySet
    verdicts: dict[str, Verdict]


def object_name(obj: Mapping[str, Any]) -> str:
    """metadata.name, or "" where there is none (the loader then says so)."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def _metadata_field(obj: Mapping[str, Any], key: str, default: Any) -> Any:
    metadata = obj.get("metadata")
    return metadata.get(key, default) if isinstance(metadata, Mapping) else default


def document_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an object a policy file holds: apiVersion, kind, metadata.name and spec (what is written)."""
    document: dict[str, Any] = {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            document[key] = obj[key]
    document["metadata"] = {"name": object_name(obj)} if object_name(obj) else {}
    if "spec" in obj:
        document["spec"] = obj["spec"]
    return document


def policy_text(obj: Mapping[str, Any]) -> str:
    """The object as a policy file's text: what `policy export` writes and what the loader reads."""
    return yaml.safe_dump(document_of(obj), sort_keys=False, default_flow_style=False, allow_unicode=True)


def file_name(obj: Mapping[str, Any]) -> str:
    """NAME.yaml, the file `policy export` writes the object to. The set is sorted by it, not by the bare name:
    the loader reads a directory in file name order, and "a-b.yaml" comes before "a.yaml" though "a" comes
    before "a-b" (a glob tie between the two must fall the same way from either source)."""
    return f"{object_name(obj)}.yaml"


def source_of(obj: Mapping[str, Any]) -> str:
    """How the loader's lines name the object."""
    return SOURCE_PREFIX + (object_name(obj) or "<no name>")


def _precedence(obj: Mapping[str, Any]) -> tuple[str, str]:
    """Created first, first; then by name (RFC 3339 times in UTC sort as text)."""
    created = _metadata_field(obj, "creationTimestamp", "")
    return (created if isinstance(created, str) else "", object_name(obj))


def _generation(obj: Mapping[str, Any]) -> int:
    generation = _metadata_field(obj, "generation", 0)
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else 0


def judge_objects(objects: Iterable[Mapping[str, Any]]) -> JudgedPolicies:
    """Every object judged; the set of those that pass, in file name order (`file_name`)."""
    return _judge(sorted(objects, key=_precedence))


def _judge(ordered: list[Mapping[str, Any]]) -> JudgedPolicies:
    """`ordered` in precedence order (an earlier object keeps a contested namespace); the set served in file name
    order, steering decided over it whole."""
    files = {source_of(obj): file_name(obj) for obj in ordered}
    policies, problems = judge_sources(((source_of(obj), policy_text(obj)) for obj in ordered), files.__getitem__)
    served = {policy.name: policy for policy in policies.policies}
    verdicts = {
        object_name(obj): Verdict(
            object_name(obj), _generation(obj), tuple(problems.get(source_of(obj), ())), served.get(object_name(obj))
        )
        for obj in ordered
    }
    return JudgedPolicies(policies, verdicts)


def review_object(candidate: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The problems `candidate` (a GPUPolicy being created or changed) would have among the `others` stored now:
    empty where it may be stored. It comes after every other object, so it never takes a namespace that a
    stored policy holds; an object of the same name is the one it replaces."""
    name = object_name(candidate)
    kept = sorted((obj for obj in others if object_name(obj) != name or not name), key=_precedence)
    judged = judge_sources((source_of(obj), policy_text(obj)) for obj in [*kept, candidate])[1]
    # Objects that fail on their own serve nothing and claim nothing: their problems are theirs, not the candidate's.
    return tuple(judged.get(source_of(candidate), ()))


def is_policy_object(obj: Any) -> bool:
    """Whether `obj` says it is a GPUPolicy (of any version of the group)."""
    return (
        isinstance(obj, Mapping)
        and obj.get("kind") == KIND
        and isinstance(obj.get("apiVersion"), str)
        and obj["apiVersion"].startswith(GROUP + "/")
    )


__all__ = [
    "GROUP",
    "PLURAL",
    "RESOURCE",
    "VERSION",
    "JudgedPolicies",
    "Verdict",
    "document_of",
    "file_name",
    "is_policy_object",
    "judge_objects",
    "object_name",
    "policy_text",
    "review_object",
]
