"""How `check` and `audit` report decisions: a table, YAML, JSON or a diff, and the exit code.

Both commands turn each engine `Decision` into a `Result` and hand the list here, so a report from a GitOps
repository and one from a live cluster read the same.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml

from webhook.admission.customresources import UNREAD
from webhook.admission.engine import Decision
from webhook.cli import goyaml

FORMATS = ("table", "yaml", "json")


@dataclass(slots=True)
class Result:
    """One evaluated object, as every output format shows it."""

    source: str  # the file (or "<stdin>"), or the cluster for `audit`
    document: int  # the document in that file; for `audit`, the object's position in the listing
    kind: str
    name: str
    namespace: str
    policy: str
    allowed: bool
    mutated: bool
    skipped: bool
    decision: str  # the engine's verdict: "allow" | "deny" | "warn" (policy violations as warnings) | "audit"
    patch: list[dict[str, Any]]
    warnings: list[str]
    denials: list[str]
    object: dict[str, Any]  # after mutation (the input itself when nothing changes)
    original: dict[str, Any] = field(repr=False)  # as read, for --diff
    item: int | None = None  # the index in a `kind: List`'s items
    owner: str | None = None  # `Kind/name` of the controller that owns it (audit)
    unread: str = ""  # why an object of a kind the engine does not read, which asks for GPUs, was not judged

    @property
    def label(self) -> str:
        where = f"{self.source}#{self.document}"
        return where + (f" items[{self.item}]" if self.item is not None else "")

    @property
    def affected(self) -> bool:
        """Whether the webhook would do anything about it: deny, change or warn."""
        return not self.skipped and (self.mutated or not self.allowed or bool(self.warnings))

    @property
    def ref(self) -> str:
        return f"{self.kind or '?'}/{self.name or '?'}"

    @property
    def verdict(self) -> str:
        """The table's word: a mutation notice alone does not make an object "warned"; a violation does."""
        if self.skipped:
            return "skipped"
        if not self.allowed:
            return "denied"
        return {"warn": "warned", "audit": "audit"}.get(self.decision, "allowed")

    def to_json(self) -> dict[str, Any]:
        """The issue's JSON shape, key for key."""
        return {
            "source": self.source,
            "document": self.document,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "policy": self.policy,
            "allowed": self.allowed,
            "mutated": self.mutated,
            "skipped": self.skipped,
            "patch": self.patch,
            "warnings": self.warnings,
            "denials": self.denials,
            "object": self.object,
        }


def make_result(
    decision: Decision,
    obj: dict[str, Any],
    *,
    source: str,
    document: int,
    namespace: str,
    item: int | None = None,
    owner: str | None = None,
) -> Result:
    """`warnings` are the decision's, plus the violations under `audit` enforcement: the webhook admits those
    quietly, and the CLI exists to show them."""
    denials = list(decision.denials)
    warnings = list(decision.warnings)
    if decision.verdict == "audit":
        warnings += decision.violations
    metadata = found if isinstance(found := obj.get("metadata"), dict) else {}
    kind, name = obj.get("kind"), metadata.get("name") or metadata.get("generateName")
    return Result(
        source=source,
        document=document,
        kind=kind if isinstance(kind, str) else "",
        name=name if isinstance(name, str) else "",
        namespace=namespace,
        policy=decision.policy,
        allowed=decision.allowed,
        mutated=decision.mutated_any,
        skipped=decision.skipped,
        decision=decision.verdict,
        patch=list(decision.patch),
        warnings=warnings,
        denials=denials,
        object=decision.mutated if decision.mutated_any else obj,
        original=obj,
        item=item,
        owner=owner,
        unread=decision.skip_reason if decision.skipped and decision.skip_reason.startswith(UNREAD) else "",
    )


@dataclass(frozen=True, slots=True)
class Summary:
    objects: int
    allowed: int
    denied: int
    mutated: int
    skipped: int
    warned: int

    def to_json(self) -> dict[str, int]:
        return {
            "objects": self.objects,
            "allowed": self.allowed,
            "denied": self.denied,
            "mutated": self.mutated,
            "skipped": self.skipped,
        }

    def line(self) -> str:
        noun = "object" if self.objects == 1 else "objects"
        return (
            f"{self.objects} {noun}: {self.allowed} allowed, {self.denied} denied, {self.mutated} mutated, "
            f"{self.skipped} skipped, {self.warned} with warnings"
        )


def summarize(results: Sequence[Result]) -> Summary:
    """Skipped objects count as allowed (the webhook admits them untouched): allowed + denied = objects."""
    return Summary(
        objects=len(results),
        allowed=sum(r.allowed for r in results),
        denied=sum(not r.allowed for r in results),
        mutated=sum(r.mutated for r in results),
        skipped=sum(r.skipped for r in results),
        warned=sum(bool(r.warnings) for r in results),
    )


def exit_code(results: Sequence[Result], *, fail_on_warn: bool = False) -> int:
    """0 when everything is admitted; 1 when anything is denied, or warned with `fail_on_warn`."""
    if any(not r.allowed for r in results):
        return 1
    if fail_on_warn and any(r.warnings for r in results):
        return 1
    return 0


# --- colour ---------------------------------------------------------------------------------------------


_COLOURS = {"red": "31", "green": "32", "yellow": "33", "cyan": "36", "dim": "2", "bold": "1"}
_VERDICT_COLOUR = {
    "denied": "red",
    "warned": "yellow",
    "audit": "yellow",
    "allowed": "green",
    "skipped": "dim",
}


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _paint(text: str, colour: str | None, enabled: bool) -> str:
    if not enabled or colour is None:
        return text
    return f"\033[{_COLOURS[colour]}m{text}\033[0m"


# --- message lines (table, and stderr for yaml/diff) ----------------------------------------------------


def message_lines(results: Iterable[Result], *, colour: bool = False) -> list[str]:
    """One line per denial and per warning: `DENY file#doc Kind/name: message`."""
    lines = []
    for r in results:
        for denial in r.denials:
            lines.append(f"{_paint('DENY', 'red', colour)} {r.label} {r.ref}: {denial}")
        for warning in r.warnings:
            lines.append(f"{_paint('WARN', 'yellow', colour)} {r.label} {r.ref}: {warning}")
        if r.unread:
            lines.append(f"{_paint('SKIP', 'dim', colour)} {r.label} {r.ref}: {r.unread}")
    return lines


# --- formats --------------------------------------------------------------------------------------------


_HEADERS = ("SOURCE", "KIND/NAME", "NAMESPACE", "POLICY", "VERDICT", "MUTATIONS")


def render_table(
    results: Sequence[Result], stream: TextIO, *, colour: bool = False, summary: Summary | None = None
) -> None:
    """One row per object, then one line per denial and warning, then the summary."""
    rows = []
    for r in results:
        name = r.ref + (f" (owner {r.owner})" if r.owner else "")
        mutations = "-" if r.skipped else str(len(r.patch))
        rows.append((r.label, name, r.namespace, r.policy or "-", r.verdict, mutations))
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(_HEADERS)]

    def line(cells: Sequence[str], colours: Sequence[str | None]) -> str:
        padded = [_paint(c.ljust(w), col, colour) for c, w, col in zip(cells, widths, colours, strict=True)]
        return "  ".join(padded).rstrip()

    stream.write(line(_HEADERS, ["bold"] * len(_HEADERS)) + "\n")
    for row in rows:
        stream.write(line(row, [None, None, None, None, _VERDICT_COLOUR[row[4]], None]) + "\n")
    messages = message_lines(results, colour=colour)
    if messages:
        stream.write("\n" + "\n".join(messages) + "\n")
    stream.write("\n" + (summary or summarize(results)).line() + "\n")


def render_json(
    results: Sequence[Result],
    stream: TextIO,
    *,
    summary: Summary | None = None,
    skipped_resources: Sequence[dict[str, Any]] | None = None,
    drift: Sequence[dict[str, Any]] | None = None,
    budgets: dict[str, Any] | None = None,
) -> None:
    """`results` and `summary`; audit adds `skipped_resources` (what it could not list), empty when complete,
    `drift` (the policies' drift against the nodes) when it could list the nodes, and `budgets` (each
    namespace's GPU use against its quotas) when it could list the ResourceQuotas."""
    report: dict[str, Any] = {
        "results": [r.to_json() for r in results],
        "summary": (summary or summarize(results)).to_json(),
    }
    if skipped_resources is not None:
        report["skipped_resources"] = list(skipped_resources)
    if drift is not None:
        report["drift"] = list(drift)
    if budgets is not None:
        report["budgets"] = budgets
    stream.write(json.dumps(report, indent=2) + "\n")  # one write: json.dump's many small writes are slow


def dump_yaml(obj: Any) -> str:
    return yaml.dump(obj, Dumper=goyaml.Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def yaml_documents(results: Sequence[Result], documents: Sequence[Any] | None = None) -> list[Any]:
    """The documents to print, mutated where the webhook would mutate them.

    With `documents` (check's `manifests.Document`s), every input document comes out in order and a List keeps
    its shape with its items replaced; without (audit), each result's object is one document.
    """
    if documents is None:
        return [r.object for r in results]
    by_document: dict[tuple[str, int], list[Result]] = {}
    for r in results:
        by_document.setdefault((r.source, r.document), []).append(r)
    out: list[Any] = []
    for document in documents:
        if document.content is None:
            continue  # an empty document (a template that rendered nothing): nothing to apply
        found = by_document.get((document.source, document.index), [])
        if document.is_list:
            content = copy.copy(document.content)
            items = list(content["items"])
            for r in found:
                if r.item is not None:
                    items[r.item] = r.object
            content["items"] = items
            out.append(content)
        elif found:
            out.append(found[0].object)
        else:
            out.append(document.content)
    return out


def render_yaml(results: Sequence[Result], stream: TextIO, documents: Sequence[Any] | None = None) -> None:
    """A valid multi-document YAML stream and nothing else (Helm reads it back as a post-renderer)."""
    for i, document in enumerate(yaml_documents(results, documents)):
        if i:
            stream.write("---\n")
        stream.write(dump_yaml(document))


def render_diff(results: Sequence[Result], stream: TextIO, *, colour: bool = False) -> None:
    """A unified diff (YAML before and after) of every object the webhook would change."""
    for r in results:
        if not r.mutated:
            continue
        before = dump_yaml(r.original).splitlines(keepends=True)
        after = dump_yaml(r.object).splitlines(keepends=True)
        label = f"{r.label} {r.ref}"
        for line in difflib.unified_diff(before, after, fromfile=f"a/{label}", tofile=f"b/{label}"):
            if not colour:
                stream.write(line)
            elif line.startswith(("+++", "---")):
                stream.write(_paint(line.rstrip("\n"), "bold", True) + "\n")
            elif line.startswith("+"):
                stream.write(_paint(line.rstrip("\n"), "green", True) + "\n")
            elif line.startswith("-"):
                stream.write(_paint(line.rstrip("\n"), "red", True) + "\n")
            elif line.startswith("@@"):
                stream.write(_paint(line.rstrip("\n"), "cyan", True) + "\n")
            else:
                stream.write(line)


REDACTED = "<redacted: --show-env-values>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # the whole manifest, env values included


def redact_env_values(result: Result) -> Result:
    """`result` with the env values it carries replaced by REDACTED, in the object before and after and in the
    patch: a listing of other teams' workloads (audit) or a diff pasted into a review must not spread their
    values, secrets included. The values the webhook writes (its memory-fraction variables) stay readable, as
    do references (`valueFrom`), names and everything else. So does kubectl's last-applied annotation, which
    holds them all, is redacted whole."""
    from dataclasses import replace

    patch = [_redact_op(op) for op in result.patch]
    return replace(result, object=_redact(result.object), original=_redact(result.original), patch=patch)


def _redact(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        if key == "annotations" and isinstance(value.get(LAST_APPLIED), str):
            value = {**value, LAST_APPLIED: REDACTED}
        return {k: _redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "env":
            return [_redact_entry(entry) for entry in value]
        return [_redact(item) for item in value]
    return value


def _redact_entry(entry: Any) -> Any:
    from webhook.admission.phases.mutate import WATCHED_ENV

    if isinstance(entry, dict) and "value" in entry and entry.get("name") not in WATCHED_ENV:
        return {**entry, "value": REDACTED}
    return entry


def _redact_op(op: dict[str, Any]) -> dict[str, Any]:
    path, value = op.get("path"), op.get("value")
    if not isinstance(path, str) or "value" not in op:
        return op
    parts = path.split("/")
    if parts[-1] == "env" and isinstance(value, list):
        return {**op, "value": [_redact_entry(entry) for entry in value]}
    if "env" in parts[:-1]:  # one entry (`/env/-`, `/env/3`) or one entry's value (`/env/3/value`)
        if parts[-1] == "value" and parts[-2] != "env":
            return {**op, "value": REDACTED}
        return {**op, "value": _redact_entry(value)}
    return {**op, "value": _redact(value, parts[-1])}


def report(
    results: Sequence[Result],
    fmt: str,
    stdout: TextIO,
    stderr: TextIO,
    *,
    diff: bool = False,
    documents: Sequence[Any] | None = None,
    fail_on_warn: bool = False,
    only_affected: bool = False,
    skipped_resources: Sequence[dict[str, Any]] | None = None,
    drift: Sequence[dict[str, Any]] | None = None,
    budgets: dict[str, Any] | None = None,
    redact: bool = False,
) -> int:
    """Write `results` in `fmt` (or as a diff) and return the exit code.

    With `redact`, env values are printed as REDACTED (`redact_env_values`); the table shows none anyway.

    With `only_affected` (audit), objects the webhook would leave alone are counted in the summary but not
    listed. YAML and diff output keep stdout machine-readable (a post-renderer, a patch to review), so their
    denial and warning lines go to stderr. `skipped_resources` (audit's unlistable resources) go into JSON and
    under the table (a saved report says it is incomplete); YAML and diff have no room for them, and audit
    says them on stderr whatever the format. `drift` (audit's, as JSON objects) goes into JSON only: the
    caller prints its table under the table, and on stderr under YAML and diff; `budgets` likewise.
    """
    summary = summarize(results)
    shown = [r for r in results if r.affected] if only_affected else list(results)
    if redact:
        shown = [redact_env_values(r) for r in shown]
    if diff:
        render_diff(shown, stdout, colour=use_colour(stdout))
        lines = message_lines(shown, colour=use_colour(stderr))
        stderr.write("".join(line + "\n" for line in lines) + summary.line() + "\n")
    elif fmt == "json":
        render_json(shown, stdout, summary=summary, skipped_resources=skipped_resources, drift=drift, budgets=budgets)
    elif fmt == "yaml":
        render_yaml(shown, stdout, documents)
        stderr.write("".join(line + "\n" for line in message_lines(shown, colour=use_colour(stderr))))
    else:
        render_table(shown, stdout, colour=use_colour(stdout), summary=summary)
        if skipped_resources:  # a saved table must not pass for a complete audit
            names = ", ".join(skipped["resource"] for skipped in skipped_resources)
            stdout.write(f"incomplete: {names} could not be listed (forbidden), so the report leaves them out\n")
    return exit_code(results, fail_on_warn=fail_on_warn)
