"""The per-container and per-pod maxima (validate.py: `_resource`, `_over_mapped_maximum`, `_pod_total`), with
validation's own sentences (its templates, filled with slots): one line per container over its maximum, one
per resource whose pod total is over the per-pod maximum."""

from __future__ import annotations

from collections.abc import Callable

from webhook.admission.base.quantity import quantity_text
from webhook.admission.base.resources import (
    DEVICE_AMOUNTS,
    INTEL_PREFIX,
    MIG_PREFIX,
    NVIDIA_GPU,
    SHARED_SUFFIX,
)
from webhook.admission.native.cel import all_of, bind, fill, lit, slot, strings
from webhook.admission.native.containers import SPEC, count, counted, has_map, value, whole_limit
from webhook.admission.native.family import ContainerRule, Family, Lines
from webhook.admission.native.gaps import shape
from webhook.admission.native.pools import KEY, each_key, held, key_count, key_limit, named
from webhook.admission.phases import validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

NAME, SHOWN, COUNT, HELD = slot("name"), slot("shown"), slot("count"), slot("held")


class Maxima(Family):
    name = "maxima"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        rules = Rules.of(policy)
        found = []
        for name in device_counts(policy):
            found.append(_container_rule(name, rules))
            if name == NVIDIA_GPU and rules.mapping_target is not None:
                found.append(_unmapped_rule(rules))
        if shape(policy) is not None:
            found += [_prefixed_rule(replica, rules) for replica in (False, True)]
            found.append(_intel_rule(rules))
            found.append(_zero_rule(rules))  # after every resource's own lines, as container_counts says it
        return found

    def lines(self, policy: Policy) -> list[Lines]:
        rules = Rules.of(policy)
        if rules.counts_memory:
            return []  # the pod's maximum counts GPUs' worth of memory there (memshares.py)
        return [_pod_rule(index, name, rules) for index, name in enumerate(device_counts(policy))]


def device_counts(policy: Policy) -> list[str]:
    """The resources judged by name that count devices (a memory backend's amounts of one GPU have no maximum of
    their own: validate._resource)."""
    return [name for name in named(policy) if name not in DEVICE_AMOUNTS]


def _container_rule(name: str, rules: Rules) -> ContainerRule:
    """(condition on `c`, its sentence) for one resource over the per-container maximum."""
    policy = rules.policy
    mode = policy.sharing.mode
    exprs = {"shown": value("limits", name), "count": f"string({count(name)})"}
    many = backend_of(policy).many_replicas(policy, COUNT)
    if name == NVIDIA_GPU and rules.mapping_target is not None:  # left as written: over the target's maximum
        target = rules.mapping_target
        maximum = rules.container_maximum(target)
        what = validate.mapped_what(COUNT, target, mode)
        if rules.one_shared_replica and rules.is_replica(target):
            sentence = validate.one_share_mapped_line(what, policy.name, many)
        elif rules.one_mig_slice and target.startswith(MIG_PREFIX):
            sentence = validate.one_slice_line(what, policy.name)
        else:
            sentence = validate.over_container_maximum_line(what, maximum, policy.name)
    else:
        maximum, sentence = _over_maximum(name, name, rules)
    return ContainerRule(all_of([whole_limit(name), f"{count(name)} > {maximum}"]), fill(sentence, exprs))


def _unmapped_rule(rules: Rules) -> ContainerRule:
    """`nvidia.com/gpu: N` within the target's maximum that the mapping left (validate._left_unmapped): after the
    MAP it is there only where the container already names the target (replicas.mapping skips it), a zero of it
    say, as mutate._rename skips it."""
    policy = rules.policy
    target = rules.mapping_target
    assert target is not None
    maximum = rules.container_maximum(target)
    sentence = validate.left_unmapped_line(quantity_text(SHOWN), target, policy.sharing.mode, policy.name)
    condition = all_of([whole_limit(NVIDIA_GPU), f"{count(NVIDIA_GPU)} > 0", f"{count(NVIDIA_GPU)} <= {maximum}"])
    return ContainerRule(condition, fill(sentence, {"shown": value("limits", NVIDIA_GPU)}))


def _zero_rule(rules: Rules) -> ContainerRule:
    """A managed resource at 0 beside one the container holds (validate._zero_companions): one line per zero,
    naming the first it holds (the least name: the API server sends a map's keys sorted). Several zeros in one
    container are outside the compiled set (scope.py): a CEL map's keys come in no order. The condition is only
    that there are two limits (the list may be empty), so that the counted test is written twice, not four times."""
    held = "h"
    sentence = validate.zero_companion_line(
        NAME, quantity_text(SHOWN), HELD, quantity_text(slot("heldshown")), rules.policy.name
    )
    exprs = {"name": KEY, "shown": key_limit(), "held": f"{held}.min()", "heldshown": key_limit(f"{held}.min()")}
    zeros = f"c.resources.limits.filter({KEY}, {counted(KEY, rules.class_names)} && {key_count()} == 0)"
    said = f"size({held}) == 0 ? [] : {zeros}.map({KEY}, {fill(sentence, exprs)})"
    nonzero = f"c.resources.limits.filter(j, {counted('j', rules.class_names)} && {key_count('j')} > 0)"
    condition = f"{has_map('limits')} && size(c.resources.limits) > 1"
    return ContainerRule(condition, bind(nonzero, held, said), many=True, maybe_empty=True)


def _over_maximum(name: str, written: str, rules: Rules) -> tuple[int, str]:
    """The per-container maximum of `name` and validation's sentence for a container over it (`_resource`),
    naming the resource `written` (`name` itself, or a slot where the name is the container's)."""
    policy = rules.policy
    maximum = rules.container_maximum(name)
    shown = quantity_text(SHOWN)  # a quantity as the API server serializes it: a short string, quoted
    if rules.one_shared_replica and rules.is_replica(name):
        many = backend_of(policy).many_replicas(policy, COUNT)
        return maximum, validate.one_share_line(written, shown, policy.sharing.mode, policy.name, many)
    if rules.one_mig_slice and (name.startswith(MIG_PREFIX) or name == rules.mig_single_resource):
        return maximum, validate.one_slice_line(f"{written} {shown}", policy.name)
    return maximum, validate.over_container_maximum_line(f"{written} {shown}", maximum, policy.name)


def _prefixed_rule(replica: bool, rules: Rules) -> ContainerRule:
    """Each `nvidia.com/mig-*` limit outside the resources judged by name (pools.prefixed) over its maximum: a
    MIG slice's replica (`*.shared`, `replica`) is held to the replicas' maximum, any other to the slices'. The
    rule and sentence are those of such a name (`example`), with the container's name and quantity in it."""
    example = MIG_PREFIX + "example" + (SHARED_SUFFIX if replica else "")
    assert rules.is_replica(example) == replica and not rules.is_replica(MIG_PREFIX + "example")
    maximum, sentence = _over_maximum(example, NAME, rules)
    suffix = f"{KEY}.endsWith({lit(SHARED_SUFFIX)})"
    keep = f"{held(rules.policy, maximum)} && {'' if replica else '!'}{suffix}"
    exprs = {"name": KEY, "shown": key_limit(), "count": f"string({key_count()})"}
    condition, sentences = each_key(keep, fill(sentence, exprs))
    return ContainerRule(condition, sentences, many=True)


def _intel_rule(rules: Rules) -> ContainerRule:
    """Each of Intel's GPU devices (`gpu.intel.com/i915`, `xe`: any `gpu.intel.com/*` limit but its amounts of one
    GPU, which validation does not count) over the whole-GPU maximum, as validation judges any such name. Their
    pod totals are per name, and the names are not known in advance (scope.py: gaps.PREFIXED_TOTALS)."""
    example = INTEL_PREFIX + "example"
    assert not rules.is_replica(example)
    maximum, sentence = _over_maximum(example, NAME, rules)
    keep = all_of(
        [
            f"{KEY}.startsWith({lit(INTEL_PREFIX)})",
            f"!({KEY} in {strings(sorted(DEVICE_AMOUNTS))})",
            f"!{KEY}.endsWith({lit(SHARED_SUFFIX)})",  # a replica's name: outside (scope.py)
            f"quantity({key_limit()}).isInteger()",
            f"{key_count()} > {maximum}",
        ]
    )
    exprs = {"name": KEY, "shown": key_limit(), "count": f"string({key_count()})"}
    condition, sentences = each_key(keep, fill(sentence, exprs))
    return ContainerRule(condition, sentences, many=True)


def effective_total(k: str, held: str, amount: Callable[[str], str]) -> tuple[tuple[str, str], ...]:
    """The variables (suffixed `k`) of a pod's effective total of an amount, as validate.effective_total counts
    it with sidecars (KEP-753): `held` (of a container `c`) keeps those that hold some, `amount` (of the
    container named by its argument) is its CEL int. `total{k}` is the total, `running{k}` the containers that
    run together at that peak: the app containers and every sidecar, unless a regular init container with the
    sidecars started before it holds more (the first such peak)."""
    init, app = f"{SPEC}.initContainers", f"{SPEC}.containers"
    sidecar = "has(c.restartPolicy) && c.restartPolicy == 'Always'"
    before = f"{init}.indexOf(s) < {init}.indexOf(c)"
    summed = f".map(c, {amount('c')}).sum()"
    return (
        (f"sidecars{k}", f"has({init}) ? {init}.filter(c, {held} && {sidecar}) : []"),
        (f"inits{k}", f"has({init}) ? {init}.filter(c, {held} && !({sidecar})) : []"),
        (f"apps{k}", f"has({app}) ? {app}.filter(c, {held}) : []"),
        (  # each regular init container's amount with the sidecars started before it
            f"peaks{k}",
            f"variables.inits{k}.map(c, {amount('c')} + "
            f"variables.sidecars{k}.filter(s, {before}).map(s, {amount('s')}).sum())",
        ),
        (f"together{k}", f"variables.sidecars{k}{summed} + variables.apps{k}{summed}"),
        (f"peak{k}", f"size(variables.peaks{k}) > 0 ? variables.peaks{k}.max() : 0"),
        (
            f"first{k}",
            f"variables.peak{k} > variables.together{k} ? variables.peaks{k}.indexOf(variables.peak{k}) : -1",
        ),
        (
            f"running{k}",
            f"variables.first{k} >= 0 ? variables.sidecars{k}.filter(s, {init}.indexOf(s) < "
            f"{init}.indexOf(variables.inits{k}[variables.first{k}])) + [variables.inits{k}[variables.first{k}]] "
            f": variables.sidecars{k} + variables.apps{k}",
        ),
        (f"total{k}", f"variables.first{k} >= 0 ? variables.peak{k} : variables.together{k}"),
    )


def _pod_rule(index: int, name: str, rules: Rules) -> Lines:
    """The pod's effective total of `name` over the per-pod maximum, as validate.effective_total counts it with
    sidecars (KEP-753): the app containers and every sidecar run together, unless a regular init container with
    the sidecars started before it holds more (the first such peak); the line names those that run together."""
    policy = rules.policy
    k = str(index)
    variables = effective_total(k, f"{whole_limit(name)} && {count(name)} > 0", lambda var: count(name, var))
    running, total = f"variables.running{k}", f"variables.total{k}"
    shown = validate.mapped_shown(name, policy.sharing.mode) if name == rules.mapping_target else name
    entry = fill(validate.running_entry(NAME, COUNT), {"name": "c.name", "count": f"string({count(name)})"})
    together = f"size({running}) > 1 ? {lit(validate.together_words(2))} : {lit(validate.together_words(1))}"
    sentence = validate.labelled(
        "pod",
        validate.pod_total_line(shown, slot("total"), slot("together"), slot("named"), rules.max_per_pod, policy.name),
    )
    line = fill(
        sentence,
        {"total": f"string({total})", "together": together, "named": f"{running}.map(c, {entry}).join(', ')"},
    )
    alone = f"size({running}) == 1 && {total} > {rules.container_maximum(name)}"
    over = f"{total} > {rules.max_per_pod} && !({alone})"
    return Lines(f"({over}) ? [{line}] : []", variables)
