"""CEL for one container `c` of a section: its resources and where it is, guarded so that nothing errors on a
container without them (an error in a policy under failurePolicy Fail refuses the pod).

The pod spec is found where the object's kind keeps it (podspec.POD_SPEC_PATHS): the variables `spec` (the spec,
or an empty map where the object has none) and `at` (its JSON Pointer), chosen by `request.kind.kind`, so that
one policy reads and patches a Pod, a workload's template and a PodTemplate alike.
"""

from __future__ import annotations

from collections.abc import Collection

from webhook.admission.base.patch import pointer
from webhook.admission.base.podspec import POD_SPEC_PATHS
from webhook.admission.base.resources import (
    DEVICE_AMOUNTS,
    DEVICE_CLASS_PREFIX,
    MANAGED_NAMES,
    MANAGED_PREFIXES,
    NVIDIA_GPU,
    SHARED_SUFFIX,
)
from webhook.admission.native.cel import any_of, bind, jsonpatch, lit, strings
from webhook.admission.native.family import SECTIONS

SPEC, AT = "variables.spec", "variables.at"
KIND = "request.kind.kind"


def _by_kind(value: dict[tuple[str, ...], str], otherwise: str) -> str:
    """A CEL choice on the request's kind: `value[path]` for the kinds whose pod spec is at `path`."""
    chosen = otherwise
    for spec_path, expression in reversed(value.items()):
        kinds = [kind for kind, at in POD_SPEC_PATHS.items() if at == spec_path]
        chosen = f"{KIND} in {strings(kinds)} ? {expression} : {chosen}"
    return chosen


def _guarded(spec_path: tuple[str, ...]) -> str:
    """The spec at `spec_path`, or an empty map where a key on the way is missing."""
    steps = [".".join(("object", *spec_path[: n + 1])) for n in range(len(spec_path))]
    return f"({' && '.join(f'has({step})' for step in steps)} ? {steps[-1]} : {{}})"


def spec_variables() -> tuple[tuple[str, str], ...]:
    """The variables `spec` and `at` (name, expression), first in every compiled policy."""
    paths = dict.fromkeys(POD_SPEC_PATHS.values())
    return (
        ("spec", _by_kind({p: _guarded(p) for p in paths}, "{}")),
        ("at", _by_kind({p: lit(pointer(p)) for p in paths}, "''")),
    )


def pod_metadata() -> tuple[str, str, str]:
    """CEL of the pod's metadata where the kind keeps it (a Pod's own, a template's, beside its spec): whether it
    is there, it (an empty map where it is not), and its JSON Pointer."""
    paths = {p: (*p[:-1], "metadata") for p in dict.fromkeys(POD_SPEC_PATHS.values())}
    present = {
        p: " && ".join(f"has({'.'.join(('object', *m[: n + 1]))})" for n in range(len(m))) for p, m in paths.items()
    }
    return (
        _by_kind(present, "false"),
        _by_kind({p: _guarded(m) for p, m in paths.items()}, "{}"),
        _by_kind({p: lit(pointer(m)) for p, m in paths.items()}, "''"),
    )


def each(section: str, keep: str, make: str) -> str:
    """One element (`make`, of the container `c`) per container of `section` for which `keep` holds."""
    spec = f"{SPEC}.{section}"
    return f"(has({spec}) ? {spec}.filter(c, {keep}).map(c, {make}) : [])"


def found_once(section: str, keep: str, name: str, body: str) -> str:
    """`body` (a CEL list) with `name` bound to the containers of `section` for which `keep` holds, in order; []
    where there is no section. A mutation that makes several operations of the same containers finds them once
    (`each_of`): `keep` is written, and evaluated for each container, once rather than per operation, which keeps
    the expression short (cel-go's parser refuses one over 100,000 characters) and its cost down."""
    spec = f"{SPEC}.{section}"
    return f"(has({spec}) ? {bind(f'{spec}.filter(c, {keep})', name, body)} : [])"


def each_of(found: str, keep: str, make: str) -> str:
    """One element (`make`, of the container `c`) per container of the list `found` (`found_once`) for which
    `keep` holds (every one where `keep` is "true"), in order: the same elements as `each` with both conditions."""
    kept = found if keep == "true" else f"{found}.filter(c, {keep})"
    return f"{kept}.map(c, {make})"


def replaced(keep: str, added: list[tuple[str, str]], removed: bool = True) -> list[str]:
    """Each section's operations that replace `nvidia.com/gpu` in each map of `c` that holds it (mutate._rename,
    memshare._replace): removed (but where `removed` is false: a name the replacement keeps), then `added` (each a
    resource name and its value, both CEL strings), in every container of the section that keeps `keep`; its
    requests where it asks for `nvidia.com/gpu` there. The containers are found once (`found_once`)."""
    parts = []
    for section in SECTIONS:
        ops = []
        for which in ("requests", "limits"):
            among = "asked" if which == "requests" else "renamed"
            at = path(section, f"/resources/{which}/")
            if removed:
                ops.append(
                    each_of(among, "true", jsonpatch("remove", f"{at} + jsonpatch.escapeKey({lit(NVIDIA_GPU)})"))
                )
            for name, text in added:
                ops.append(each_of(among, "true", jsonpatch("add", f"{at} + jsonpatch.escapeKey({name})", text)))
        asked = bind(f"renamed.filter(c, {holds('requests', NVIDIA_GPU)})", "asked", " + ".join(ops))
        parts.append(found_once(section, keep, "renamed", asked))
    return parts


def every(section: str, make: str) -> str:
    """One element (`make`, of the container `c`) per container of `section`, in its order."""
    spec = f"{SPEC}.{section}"
    return f"(has({spec}) ? {spec}.map(c, {make}) : [])"


def path(section: str, tail: str) -> str:
    """The JSON Pointer of `c` and `tail`: its place, found by its name (the API server refuses a pod spec whose
    names repeat or are missing). Comparing names, not whole containers, keeps the search cheap: indexOf(c)
    compares every field of each container, env and all, for about the budget's cost of one (about 40 times the
    CPU time on a 30-container pod in the API server's own evaluator)."""
    name = "(has({0}.name) ? {0}.name : '')"
    places = f"{SPEC}.{section}.map(x, {name.format('x')})"
    return f"{AT} + {lit(f'/{section}/')} + string({places}.indexOf({name.format('c')})) + {lit(tail)}"


def has_map(which: str) -> str:
    return f"has(c.resources) && has(c.resources.{which})"


def holds(which: str, name: str) -> str:
    """`c` names `name` in its requests or limits."""
    return f"{has_map(which)} && {lit(name)} in c.resources.{which}"


def value(which: str, name: str, var: str = "c") -> str:
    return f"{var}.resources.{which}[{lit(name)}]"


def count(name: str, var: str = "c") -> str:
    """The limit of `name` as a number of devices (call where `whole_limit` holds), of the container `var`."""
    return f"quantity({value('limits', name, var)}).asInteger()"


def whole_limit(name: str) -> str:
    """`c` has a whole-number limit of `name`."""
    return whole_key(lit(name))


def whole_key(key: str, var: str = "c") -> str:
    """The container `var` has a whole-number limit of the resource named by the CEL string `key`."""
    limits = f"{var}.resources.limits"
    return f"has({var}.resources) && has({limits}) && {key} in {limits} && quantity({limits}[{key}]).isInteger()"


def by_prefix(key: str) -> str:
    """The resource named by `key` is one the webhook manages by prefix (resources.MANAGED_PREFIXES), tested
    without an iteration of its own (an expression goes at most two levels deep)."""
    return any_of(f"{key}.startsWith({lit(prefix)})" for prefix in MANAGED_PREFIXES)


def managed(key: str) -> str:
    """The resource named by `key` is one the webhook manages (resources.MANAGED_NAMES and MANAGED_PREFIXES)."""
    return any_of([f"{key} in {strings(MANAGED_NAMES)}", by_prefix(key)])


def any_managed() -> str:
    """`c` asks for a resource the webhook manages (mutation leaves every other container alone)."""
    return any_of(
        f"{has_map(which)} && c.resources.{which}.exists(n, {managed('n')})" for which in ("requests", "limits")
    )


def counted(key: str, class_names: Collection[str]) -> str:
    """CEL: the limit `key` of `c` is one of validation's counts (validate.container_counts: a managed resource,
    whole, but an amount of one GPU (resources.DEVICE_AMOUNTS) or a DeviceClass resource outside `class_names`,
    the policy's GPU classes)."""
    names = counted_names()
    prefixes = counted_prefixes()
    amounts = sorted(name for name in DEVICE_AMOUNTS if name.startswith(prefixes))
    by_prefix = f"{strings(list(prefixes))}.exists(p, {key}.startsWith(p)) && !({key} in {strings(amounts)})"
    terms = [f"{key} in {strings(names)}", by_prefix]
    if class_names:
        terms.append(f"{key} in {strings(sorted(class_names))}")
    return f"({any_of(terms)}) && quantity(c.resources.limits[{key}]).isInteger()"


def counted_names() -> list[str]:
    """The names validation counts by name, whatever the policy (but its own DeviceClasses' resources)."""
    return [name for name in MANAGED_NAMES if name not in DEVICE_AMOUNTS]


def counted_prefixes() -> tuple[str, ...]:
    """The prefixes of the names validation counts (a DeviceClass resource counts only where it is the policy's
    own, by name)."""
    return tuple(prefix for prefix in MANAGED_PREFIXES if prefix != DEVICE_CLASS_PREFIX)


def counts_replica(target: str, class_names: Collection[str]) -> str:
    """`c` holds a shared replica as validation counts one (Rules.is_replica): the policy's `target`, or any
    `*.shared` (a MIG slice's replica among them), among validation's counts (`counted`), whatever the amount."""
    replica = f"(n == {lit(target)} || n.endsWith({lit(SHARED_SUFFIX)})) && {counted('n', class_names)}"
    return f"{has_map('limits')} && c.resources.limits.exists(n, {replica})"
