"""The per-container and per-pod maxima (validate.py: `_resource`, `_over_mapped_maximum`, `_pod_total`), with
validation's own sentences (its templates, filled with slots): one line per container over its maximum, one
per resource whose pod total is over the per-pod maximum."""

from __future__ import annotations

from webhook.admission.base.quantity import quantity_text
from webhook.admission.base.resources import MIG_PREFIX, NVIDIA_GPU, NVIDIA_GPU_SHARED
from webhook.admission.native.cel import all_of, fill, lit, slot
from webhook.admission.native.containers import SPEC, count, value, whole_limit
from webhook.admission.native.family import ContainerRule, Family, Lines
from webhook.admission.native.gaps import shape
from webhook.admission.native.migslices import slice_names
from webhook.admission.phases import validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

NAME, SHOWN, COUNT = slot("name"), slot("shown"), slot("count")


class Maxima(Family):
    name = "maxima"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        return [_container_rule(name, Rules.of(policy)) for name in _names(policy)]

    def lines(self, policy: Policy) -> list[Lines]:
        rules = Rules.of(policy)
        return [_pod_rule(index, name, rules) for index, name in enumerate(_names(policy))]


def _names(policy: Policy) -> list[str]:
    """The resources whose maxima are compiled: those the covered pods hold (scope.py)."""
    kind = shape(policy)
    if kind is None:
        return []
    if kind == "mig":
        return sorted({NVIDIA_GPU, *slice_names(policy)})
    return sorted({NVIDIA_GPU, backend_of(policy).shared_resource(policy.sharing) or NVIDIA_GPU_SHARED})


def _container_rule(name: str, rules: Rules) -> ContainerRule:
    """(condition on `c`, its sentence) for one resource over the per-container maximum."""
    policy = rules.policy
    mode = policy.sharing.mode
    exprs = {"shown": value("limits", name), "count": f"string({count(name)})"}
    shown = quantity_text(SHOWN)  # a quantity as the API server serializes it: a short string, quoted
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
        maximum = rules.container_maximum(name)
        if rules.one_shared_replica and rules.is_replica(name):
            sentence = validate.one_share_line(name, shown, mode, policy.name, many)
        elif rules.one_mig_slice and (name.startswith(MIG_PREFIX) or name == rules.mig_single_resource):
            sentence = validate.one_slice_line(f"{name} {shown}", policy.name)
        else:
            sentence = validate.over_container_maximum_line(f"{name} {shown}", maximum, policy.name)
    return ContainerRule(all_of([whole_limit(name), f"{count(name)} > {maximum}"]), fill(sentence, exprs))


def _pod_rule(index: int, name: str, rules: Rules) -> Lines:
    """The pod's effective total of `name` over the per-pod maximum, as validate.effective_total counts it with
    sidecars (KEP-753): the app containers and every sidecar run together, unless a regular init container with
    the sidecars started before it holds more (the first such peak); the line names those that run together."""
    policy = rules.policy
    init, app = f"{SPEC}.initContainers", f"{SPEC}.containers"
    k = index
    held = f"{whole_limit(name)} && {count(name)} > 0"
    sidecar = "has(c.restartPolicy) && c.restartPolicy == 'Always'"
    before = f"{init}.indexOf(s) < {init}.indexOf(c)"
    summed = f".map(c, {count(name)}).sum()"
    variables = (
        (f"sidecars{k}", f"has({init}) ? {init}.filter(c, {held} && {sidecar}) : []"),
        (f"inits{k}", f"has({init}) ? {init}.filter(c, {held} && !({sidecar})) : []"),
        (f"apps{k}", f"has({app}) ? {app}.filter(c, {held}) : []"),
        (  # each regular init container's count with the sidecars started before it
            f"peaks{k}",
            f"variables.inits{k}.map(c, {count(name)} + "
            f"variables.sidecars{k}.filter(s, {before}).map(s, {count(name, 's')}).sum())",
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
