"""Re-applies: telling the user's values from the webhook's own earlier output.

`kubectl apply` (client-side) patches the live object with the fields where the user's file differs from it,
and server-side apply re-asserts the applier's fields: either way a second apply of the same file sends the
user's values back into an object that holds the webhook's output, and keeps the fields only the webhook wrote
(kubectl's three-way merge never deletes what the last applied file did not have; the API server runs field
management before mutating admission, so the webhook's fields belong to no manager and apply keeps them).
Kept-name time-slicing then shows `requests: 250m` (the user's) beside `limits: 1` (the webhook's), renamed MPS
`nvidia.com/gpu: 1` (the user's) beside `nvidia.com/gpu.shared: 1` (the webhook's).

So mutation records, in the annotation RECORD on the object that holds the pod spec, for each container it
changed: the managed GPU resources as the user wrote them (`u`), as the webhook left them (`s`), the env
entries it appended (`e`) and the arguments it appended (`a`: an inference engine's memory flag, engines.py).
Before mutating an object that carries the record, `rebuild` works out the user's input again, key by key:
- a value equal to what the user wrote stays;
- a value equal to the webhook's output is the webhook's: the user's value is put back, or, for a key the user
  did not write (a limit set from the request, a renamed resource), the key is dropped;
- a key the user wrote that is missing is put back when the webhook removed it (renamed it) and its output is
  still there as it wrote it;
- anything else is the user's change (a new request in the file), and is judged as such;
- an appended env entry still as the webhook wrote it is dropped, and so are appended arguments still at the
  end of `args` as the webhook wrote them (`args` is replaced whole by both kinds of apply when the file
  changes it, so a list that no longer ends with them is the user's).
Mutating that input gives the same object the first apply gave, so a re-apply changes nothing (no rollout, a
Job's immutable template untouched), and a real change (0.25 -> 0.5) gets the new decision. An edit of the
webhook's output by hand (a limit changed while the request is still the webhook's) is neither: it is refused
with a line that says to change the request as written. The record is never trusted for the verdict: the
object that results is validated as always, so a forged record can change what is mutated, never what passes.
"""

from __future__ import annotations

import json
from typing import Any

from webhook.admission.base.podspec import MUTATED_SECTIONS, container_label
from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import is_managed
from webhook.admission.base.violation import SHORT_LIMIT, Violation

RECORD = "gpu-admission.io/requested"
RECORD_LIMIT = 64 * 1024  # a record larger than this is not read (a real one is a few hundred bytes)
WHICH = ("requests", "limits")

# "section/name" -> {"u": {which: {resource: value}}, "s": {...}, "e": [env entries], "a": [args]}
Record = dict[str, dict[str, Any]]


def container_keys(spec: dict[str, Any]) -> dict[tuple[str, int], str]:
    """(section, index) -> the record's key for that container, for containers whose name is unique."""
    seen: dict[str, tuple[str, int] | None] = {}
    for section in MUTATED_SECTIONS:
        containers = spec.get(section)
        if type(containers) is not list:
            continue
        for index, body in enumerate(containers):
            name = body.get("name") if type(body) is dict else None
            if type(name) is str and name:
                key = f"{section}/{name}"
                seen[key] = None if key in seen else (section, index)
    return {place: key for key, place in seen.items() if place is not None}


def read(obj: dict[str, Any]) -> Record | None:
    """The record on `obj`, or None where there is none or it is not one (then the object is taken as written)."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if type(metadata) is dict else None
    text = annotations.get(RECORD) if type(annotations) is dict else None
    if type(text) is not str or len(text) > RECORD_LIMIT:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit: not one of ours
        return None
    if type(record) is not dict:
        return None
    return {key: entry for key, entry in record.items() if type(entry) is dict}


def managed(resources: Any) -> dict[str, dict[str, Any]]:
    """The managed GPU resources of a container's `resources`, by requests/limits (empty maps left out)."""
    found: dict[str, dict[str, Any]] = {}
    if type(resources) is dict:
        for which in WHICH:
            amounts = resources.get(which)
            if type(amounts) is dict:
                kept = {k: v for k, v in amounts.items() if type(k) is str and is_managed(k)}
                if kept:
                    found[which] = kept
    return found


def entry_for(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """The record of one container mutated from `before` (the user's) to `after`; None when unchanged."""
    if before == after:
        return None
    entry: dict[str, Any] = {}
    user, out = managed(before.get("resources")), managed(after.get("resources"))
    if user:
        entry["u"] = user
    if out:
        entry["s"] = out
    old_env, new_env = before.get("env"), after.get("env")
    if type(new_env) is list:
        old = old_env if type(old_env) is list else []
        # Appended entries only: one merged into (the user's PYTORCH_CUDA_ALLOC_CONF) stays the user's, and
        # merging into it again changes nothing.
        names = {e.get("name") for e in old if type(e) is dict}
        added = [e for e in new_env if type(e) is dict and e.get("name") not in names]
        if added:
            entry["e"] = added
    old_args, new_args = before.get("args"), after.get("args")
    if type(new_args) is list and new_args != old_args:
        old_list = old_args if type(old_args) is list else []
        if new_args[: len(old_list)] == old_list and len(new_args) > len(old_list):
            entry["a"] = new_args[len(old_list) :]  # an engine's memory flag (engines.py), appended
    return entry


def dump(record: Record) -> str | None:
    """The annotation's text: compact JSON with sorted keys, so that the same record is the same text."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True) if record else None


def _same(a: Any, b: Any) -> bool:
    """The same value, or the same quantity written two ways (`0.5` and `500m`)."""
    if a == b and type(a) is type(b):
        return True
    qa, qb = quantity_or_none(a), quantity_or_none(b)
    return qa is not None and qa == qb


def _maps(entry: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    value = entry.get(key)
    if type(value) is not dict:
        return {}
    return {which: dict(value[which]) for which in WHICH if type(value.get(which)) is dict}


def rebuild(spec: dict[str, Any], record: Record) -> tuple[dict[str, list[Any]], list[Violation]]:
    """The user's input worked out from a pod spec that holds the webhook's earlier output (module doc).

    Returns the container lists that changed (section -> list) and a violation for each container whose
    webhook output was edited by hand (then nothing is rebuilt for it).
    """
    sections: dict[str, list[Any]] = {}
    edits: list[Violation] = []
    for (section, index), key in container_keys(spec).items():
        entry = record.get(key)
        body = spec[section][index]
        if entry is None or type(body.get("resources")) is not dict:
            continue
        rebuilt, edit = _rebuild_container(body, entry, section, index)
        if edit is not None:
            edits.append(edit)
        elif rebuilt is not None:
            sections.setdefault(section, list(spec[section]))[index] = rebuilt
    return sections, edits


def _rebuild_container(
    body: dict[str, Any], entry: dict[str, Any], section: str, index: int
) -> tuple[dict[str, Any] | None, Violation | None]:
    user, out = _maps(entry, "u"), _maps(entry, "s")
    resources = body["resources"]
    new_resources = dict(resources)
    restored: list[tuple[str, str]] = []  # (which, resource) put back from the record
    edited: list[tuple[str, str, Any]] = []  # (which, resource, value): the webhook's own key, not as it left it
    for which in WHICH:
        current = resources.get(which)
        if current is not None and type(current) is not dict:
            return None, None  # malformed: validation explains
        current = current or {}
        mine, its = user.get(which, {}), out.get(which, {})
        webhook_only = {k: v for k, v in its.items() if k not in mine}
        intact = all(k in current and _same(current[k], v) for k, v in webhook_only.items())
        amounts: dict[str, Any] = {}
        for name, value in current.items():
            if type(name) is not str or not is_managed(name) or (name in mine and _same(value, mine[name])):
                amounts[name] = value  # not a GPU, or the user's as written
            elif name in its and _same(value, its[name]):
                if name in mine:
                    amounts[name] = mine[name]
                    restored.append((which, name))
            else:
                amounts[name] = value
                if name in webhook_only:
                    edited.append((which, name, value))
        for name, value in mine.items():
            if name not in current and name not in its and intact:
                amounts[name] = value  # the webhook renamed it, and its output is still there
                restored.append((which, name))
        if amounts:
            new_resources[which] = amounts
        elif current:
            del new_resources[which]  # it held the webhook's keys alone: the user wrote no such map
    if restored and edited:
        return None, _hand_edit(body, section, index, edited[0], user, out)
    new_body = dict(body)
    new_body["resources"] = new_resources
    env = body.get("env")
    added = entry.get("e")
    if type(env) is list and type(added) is list and added:
        kept = [e for e in env if e not in added]
        if not kept:
            del new_body["env"]  # it held the webhook's entries alone
        elif len(kept) != len(env):
            new_body["env"] = kept
    args = body.get("args")
    appended = entry.get("a")
    if type(args) is list and type(appended) is list and appended and args[-len(appended) :] == appended:
        # Still at the end as the webhook wrote them: a list the user changed (kubectl replaces it whole) no
        # longer ends with them, and is the user's as it stands.
        if len(args) == len(appended):
            del new_body["args"]  # it held the webhook's arguments alone
        else:
            new_body["args"] = args[: -len(appended)]
    return (None if new_body == body else new_body), None


def _hand_edit(
    body: dict[str, Any],
    section: str,
    index: int,
    edited: tuple[str, str, Any],
    user: dict[str, dict[str, Any]],
    out: dict[str, dict[str, Any]],
) -> Violation:
    which, name, value = edited
    label = container_label(section, index, body)
    written = ", ".join(f"{w} {k} {json.dumps(v)}" for w in WHICH for k, v in user.get(w, {}).items()) or "none"
    was = out.get(which, {}).get(name)
    line = (
        f"{label}: {which} {name} {json.dumps(value)} edits what gpu-admission set ({json.dumps(was)}, from "
        f"{written} as written), and the webhook makes its output again from the request on every update: "
        f"change the request as written instead"
    )
    short = f"{label}: {which} {name} edits gpu-admission's output; change the request as written instead"
    if len(short) > SHORT_LIMIT:
        short = f"{section}[{index}]: {which} {name} edits gpu-admission's output; change the request instead"
    return Violation(line, short[:SHORT_LIMIT])


# --- The env patch: entries appended and replaced one by one, never the whole list --------------------------


def env_ops(at: str, old: Any, new: list[Any]) -> list[dict[str, Any]]:
    """JSON Patch operations that turn the env list `old` into `new` (`at` is the container's pointer).

    The lists share most entries, in order (the user's, then what mutation appended): the operations follow
    their longest common subsequence, so entries that stay are not sent, and a user's literal value (a
    secret, often) is in the patch only where mutation itself changed that entry.
    """
    if type(old) is not list:
        return [{"op": "add", "path": at + "/env", "value": new}]  # absent or null: only the webhook's entries
    kept = len(old)
    if new[:kept] == old:  # the usual case: entries appended
        end = at + "/env/-"
        return [{"op": "add", "path": end, "value": entry} for entry in new[kept:]]
    pairs = _common(old, new)
    ops: list[dict[str, Any]] = []
    length, pos, i, j = len(old), 0, 0, 0
    for oi, nj in [*pairs, (len(old), len(new))]:
        olds, news = oi - i, nj - j
        both = min(olds, news)
        for t in range(both):
            ops.append({"op": "replace", "path": f"{at}/env/{pos + t}", "value": new[j + t]})
        for _ in range(olds - both):
            ops.append({"op": "remove", "path": f"{at}/env/{pos + both}"})
            length -= 1
        for t in range(both, news):
            where = "-" if pos + t == length else str(pos + t)
            ops.append({"op": "add", "path": f"{at}/env/{where}", "value": new[j + t]})
            length += 1
        pos += news + 1
        i, j = oi + 1, nj + 1
    return ops


def _common(a: list[Any], b: list[Any]) -> list[tuple[int, int]]:
    """The index pairs of a longest common subsequence of `a` and `b` (equal entries)."""
    if a == b[: len(a)]:  # the usual case: entries appended
        return [(k, k) for k in range(len(a))]
    rows, cols = len(a), len(b)
    table = [[0] * (cols + 1) for _ in range(rows + 1)]
    for x in range(rows - 1, -1, -1):
        for y in range(cols - 1, -1, -1):
            table[x][y] = table[x + 1][y + 1] + 1 if a[x] == b[y] else max(table[x + 1][y], table[x][y + 1])
    pairs, x, y = [], 0, 0
    while x < rows and y < cols:
        if a[x] == b[y]:
            pairs.append((x, y))
            x, y = x + 1, y + 1
        elif table[x + 1][y] >= table[x][y + 1]:
            x += 1
        else:
            y += 1
    return pairs
