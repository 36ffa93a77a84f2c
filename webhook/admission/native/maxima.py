"""The per-container and per-pod maxima (validate.py: `_resource`, `_over_mapped_maximum`, `_pod_total`), with
validation's own sentences (its templates, filled with slots): one line per container over its maximum, one
per resource whose pod total is over the per-pod maximum, the resources judged by name and those judged by
prefix (whose names are the pod's, found in CEL) in the order of their names."""

from __future__ import annotations

from collections.abc import Callable, Collection
from itertools import pairwise

from webhook.admission.base.podspec import container_label
from webhook.admission.base.quantity import quantity_text
from webhook.admission.base.resources import (
    DEVICE_AMOUNTS,
    DEVICE_CLASS_PREFIX,
    INTEL_PREFIX,
    MANAGED_NAMES,
    MIG_PREFIX,
    NVIDIA_GPU,
    SHARED_SUFFIX,
)
from webhook.admission.native.cel import all_of, any_of, bind, fill, lit, slot, strings
from webhook.admission.native.containers import (
    SPEC,
    count,
    counted,
    counted_names,
    counted_prefixes,
    every,
    has_map,
    value,
    whole_key,
    whole_limit,
)
from webhook.admission.native.family import SECTIONS, ContainerRule, Family, Lines
from webhook.admission.native.gaps import MOST_ZEROS, shape
from webhook.admission.native.pools import (
    KEY,
    any_key,
    held,
    kept_keys,
    key_count,
    key_limit,
    named,
    named_rule,
    other_pools,
    prefixed,
    prefixed_line,
)
from webhook.admission.native.wholes import fractional_keyed, fractional_named
from webhook.admission.phases import validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

NAME, SHOWN, COUNT, HELD = slot("name"), slot("shown"), slot("count"), slot("held")


class Maxima(Family):
    name = "maxima"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        rules = Rules.of(policy)
        found: list[ContainerRule] = []
        carried = shape(policy) is not None
        # the names judged by prefix at the prefix's place among those judged by name (their names sort together
        # there), and a value the API server takes as whole and another pool's line at its name's place, so that
        # validation's order by name holds where one of them says a line beside others
        by_prefix = (
            {MIG_PREFIX: mig_rule(rules), INTEL_PREFIX: intel_rule(rules), DEVICE_CLASS_PREFIX: _class_rule(policy)}
            if carried
            else {}
        )
        counts, others = device_counts(policy), other_pools(policy)
        for name in sorted({*judged_by_name(policy), *by_prefix}):
            if name in by_prefix:
                found.append(by_prefix[name])
                continue
            # as validate._resource says a name's lines: fractional, unshared, another pool's, then its maximum
            fractional = fractional_named(policy, name) if carried else None
            if fractional is not None:
                found.append(fractional)
            if name in rules.unshared_classes:
                found.append(_unshared_rule(name, rules))
            if name in others:
                found.append(named_rule(policy, name))
            if name in counts:
                found.append(_container_rule(name, rules))
            if name == NVIDIA_GPU and rules.mapping_target is not None:
                found.append(_unmapped_rule(rules))
        if carried:
            found.append(_zero_rule(rules))  # after every resource's own lines, as container_counts says it
        return found

    def lines(self, policy: Policy) -> list[Lines]:
        rules = Rules.of(policy)
        if rules.counts_memory:
            return []  # the pod's maximum counts GPUs' worth of memory there: memshares.py, then `class_totals`
        names = device_counts(policy)
        totals = [_pod_rule(index, name, rules) for index, name in enumerate(names)]
        if shape(policy) is None:
            return totals
        return [*_with_prefixed(rules, names, totals), *_same_gpus(rules, names)]


def judged_by_name(policy: Policy) -> set[str]:
    """The names with rules of their own, each at its place among the maxima: the counts, another pool's, and
    where the policy's GPU rules are carried every managed name, for a value the API server takes as whole."""
    carried = shape(policy) is not None
    return {*device_counts(policy), *other_pools(policy), *(MANAGED_NAMES if carried else ())}


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


def _unshared_rule(name: str, rules: Rules) -> ContainerRule:
    """NVIDIA's whole-GPU DeviceClass resource under time-slicing or MPS (validate._unshared_class): the claim
    the scheduler makes for it carries no GpuConfig, so its GPUs are the container's own, unshared."""
    sentence = validate.unshared_class_line(f"{name} {quantity_text(SHOWN)}", COUNT, rules)
    exprs = {"shown": value("limits", name), "count": f"string({count(name)})"}
    return ContainerRule(all_of([whole_limit(name), f"{count(name)} > 0"]), fill(sentence, exprs))


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
    """A managed resource at 0 beside one the container holds (validate._zero_companions): one line per zero, in
    the order of their names (`zeros_in_order`), naming the first it holds (the least name: the API server sends
    a map's keys sorted). The condition is only that there are two limits (the list may be empty), so that the
    counted test is written twice, not four times."""
    held, zeros = "h", "z"
    sentence = validate.zero_companion_line(
        NAME, quantity_text(SHOWN), HELD, quantity_text(slot("heldshown")), rules.policy.name
    )
    exprs = {"name": KEY, "shown": key_limit(), "held": f"{held}.min()", "heldshown": key_limit(f"{held}.min()")}
    lines = bind(zeros_in_order(rules.class_names), zeros, f"{zeros}.map({KEY}, {fill(sentence, exprs)})")
    nonzero = f"c.resources.limits.filter(j, {counted('j', rules.class_names)} && {key_count('j')} > 0)"
    condition = f"{has_map('limits')} && size(c.resources.limits) > 1"
    return ContainerRule(condition, bind(nonzero, held, f"size({held}) == 0 ? [] : {lines}"), many=True)


def zero_groups(class_names: Collection[str]) -> list[str | list[str]]:
    """The names validation counts (containers.counted), as the groups whose zeros the compiled rule puts in the
    order of their names: each prefix it counts by (a MIG slice, an Intel GPU), whose names sort together, at
    the prefix's own place (a name that does not begin with it sorts below them all where it sorts below the
    prefix, else above them all), and between them the names counted by name (the counts' and the policy's
    own classes), in order, in lists."""
    prefixes = counted_prefixes()
    by_name = {*counted_names(), *class_names}
    groups: list[str | list[str]] = []
    for name in sorted({*prefixes, *(name for name in by_name if not name.startswith(prefixes))}):
        if name in prefixes:
            groups.append(name)
        elif groups and isinstance(groups[-1], list):
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups


def zeros_in_order(class_names: Collection[str]) -> str:
    """CEL: the container's counted limits at 0, in the order of their names. A CEL map's keys come in no order,
    and sorting a list is Kubernetes 1.34's CEL: the names counted by name are a list written in order and
    filtered to the container's zeros; those of a prefix are found among its limits and put in order by
    comparisons, up to MOST_ZEROS of each prefix (`in_order`; more are outside the compiled set, scope.py);
    the groups joined in the order of `zero_groups`. No expression iterates more than two levels deep (the
    containers, then a list)."""
    zero = f"quantity({key_limit()}).isInteger() && {key_count()} == 0"
    parts = []
    for group in zero_groups(class_names):
        if isinstance(group, list):
            parts.append(f"{strings(group)}.filter({KEY}, {KEY} in c.resources.limits && {zero})")
        else:
            keep = f"{KEY}.startsWith({lit(group)}) && {counted(KEY, class_names)} && {key_count()} == 0"
            parts.append(bind(f"c.resources.limits.filter({KEY}, {keep})", "p", in_order("p")))
    return " + ".join(parts)


def in_order(names: str) -> str:
    """CEL: the list `names` (distinct strings) in order, where it holds at most MOST_ZEROS: compared element by
    element (string `<` compares code points, as the API server sorts a map's keys), with no iteration over it."""
    a, b, c = (f"{names}[{index}]" for index in range(MOST_ZEROS))
    two = f"{a} < {b} ? {names} : [{b}, {a}]"
    below_b = f"{b} < {c} ? {names} : {a} < {c} ? [{a}, {c}, {b}] : [{c}, {a}, {b}]"  # a < b
    below_a = f"{a} < {c} ? [{b}, {a}, {c}] : {b} < {c} ? [{b}, {c}, {a}] : [{c}, {b}, {a}]"  # b < a
    three = f"{a} < {b} ? ({below_b}) : ({below_a})"
    return f"(size({names}) == 2 ? ({two}) : size({names}) == 3 ? ({three}) : {names})"


def _over_maximum(name: str, written: str, rules: Rules) -> tuple[int, str]:
    """The per-container maximum of `name` and validation's sentence for a container over it (`_resource`),
    naming the resource `written` (`name` itself, or a slot where the name is the container's)."""
    policy = rules.policy
    maximum = rules.container_maximum(name)
    shown = quantity_text(SHOWN)  # a quantity as the API server serializes it: a short string, quoted
    if rules.one_shared_replica and rules.is_replica(name):
        many = backend_of(policy).many_replicas(policy, COUNT)
        return maximum, validate.one_share_line(written, shown, policy.sharing.mode, policy.name, many)
    if rules.one_mig_slice and rules.is_mig_slice(name):
        return maximum, validate.one_slice_line(f"{written} {shown}", policy.name)
    return maximum, validate.over_container_maximum_line(f"{written} {shown}", maximum, policy.name)


def _over_prefixed(replica: bool, rules: Rules) -> tuple[str, str]:
    """(whether the key `KEY`, an `nvidia.com/mig-*` limit outside the resources judged by name (pools.prefixed),
    is over its maximum, its line): a MIG slice's replica (`*.shared`, `replica`) is held to the replicas'
    maximum, any other to the slices'. The rule and sentence are those of such a name (`example`), with the
    container's name and quantity in it."""
    example = MIG_PREFIX + "example" + (SHARED_SUFFIX if replica else "")
    assert rules.is_replica(example) == replica and not rules.is_replica(MIG_PREFIX + "example")
    maximum, sentence = _over_maximum(example, NAME, rules)
    suffix = f"{KEY}.endsWith({lit(SHARED_SUFFIX)})"
    keep = f"{held(rules.policy, maximum)} && {'' if replica else '!'}{suffix}"
    exprs = {"name": KEY, "shown": key_limit(), "count": f"string({key_count()})"}
    return keep, fill(sentence, exprs)


def mig_rule(rules: Rules) -> ContainerRule:
    """Each `nvidia.com/mig-*` limit outside the resources judged by name: a value the API server takes as whole
    (wholes.py), or another pool's line for it (pools.prefixed_line) then its line over the maximum, name by name
    in the order of their names, as validation says them: up to MOST_ZEROS names put in order by `in_order` (more
    are outside the compiled set, scope.py). A name's lines are joined by a line break, which no line holds, and
    the names' split again: one list with no `flatten` (Kubernetes 1.34's CEL)."""
    policy = rules.policy
    parts = [
        fractional_keyed(MIG_PREFIX, judged_by_name(policy), KEY),  # alone: a value that is not whole
        prefixed_line(policy),
        *(_over_prefixed(replica, rules) for replica in (False, True)),
    ]
    keep = any_of(f"({kept})" for kept, _ in parts)
    said = ", ".join(f"({kept}) ? ({line}) : ''" for kept, line in parts)
    lines = f"[{said}].filter(s, s != '').join('\\n')"
    in_turn = f"{in_order('p')}.map({KEY}, {lines}).join('\\n').split('\\n')"
    return ContainerRule(any_key(keep), bind(kept_keys(keep), "p", in_turn), many=True)


def intel_rule(rules: Rules) -> ContainerRule:
    """Each of Intel's GPU devices (`gpu.intel.com/i915`, `xe`: any `gpu.intel.com/*` limit but its amounts of one
    GPU, which validation does not count) over the whole-GPU maximum, as validation judges any such name (their
    pod totals: `_prefixed_variables`), in the order of their names, as validation says them: up to MOST_ZEROS
    put in order by `in_order` (more are outside the compiled set, scope.py)."""
    example = INTEL_PREFIX + "example"
    assert not rules.is_replica(example)
    maximum, sentence = _over_maximum(example, NAME, rules)
    over = _intel_over(maximum)
    exprs = {"name": KEY, "shown": key_limit(), "count": f"string({key_count()})"}
    near, near_line = fractional_keyed(INTEL_PREFIX, judged_by_name(rules.policy), KEY)  # a value that is not whole
    in_turn = f"{in_order('p')}.map({KEY}, ({near}) ? ({near_line}) : ({fill(sentence, exprs)}))"
    keep = any_of([f"({near})", f"({over})"])
    return ContainerRule(any_key(keep), bind(kept_keys(keep), "p", in_turn), many=True)


def _intel_over(maximum: int) -> str:
    """The key `KEY` is one of Intel's devices whose count is over `maximum`."""
    return all_of([_intel_device(), f"quantity({key_limit()}).isInteger()", f"{key_count()} > {maximum}"])


def any_over_maximum(rules: Rules) -> str:
    """CEL: a count of the container `c` is over its per-container maximum, as validate._memory_share asks of each
    one it counts (container_counts): those judged by name, MIG's slices and replicas and Intel's devices by
    prefix."""
    named = [
        f"{whole_limit(name)} && {count(name)} > {rules.container_maximum(name)}"
        for name in device_counts(rules.policy)
    ]
    over_prefixed = [kept for kept, _ in (_over_prefixed(replica, rules) for replica in (False, True))]
    over_prefixed.append(_intel_over(rules.container_maximum(INTEL_PREFIX + "example")))
    return any_of([*named, any_key(any_of(f"({over})" for over in over_prefixed))])


def _class_rule(policy: Policy) -> ContainerRule:
    """A DeviceClass's resource judged by prefix (not the policy's GPU class) at a value the API server takes as
    whole: its line, at the prefix's place (two such are the webhook's: scope.py)."""
    keep, line = fractional_keyed(DEVICE_CLASS_PREFIX, judged_by_name(policy), KEY)
    return ContainerRule(any_key(keep), f"{kept_keys(keep)}.map({KEY}, {line})", many=True)


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
    line = _total_line(rules, lit(shown), total, running, ("c.name", f"string({count(name)})"))
    alone = f"size({running}) == 1 && {total} > {rules.container_maximum(name)}"
    over = f"{total} > {rules.max_per_pod} && !({alone})"
    return Lines(f"({over}) ? [{line}] : []", variables)


def class_totals(rules: Rules) -> list[Lines]:
    """Mode memory, after the pod's GPUs' worth of memory (validate.validate): the pod total of each of the
    policy's DeviceClasses' resources, which are devices, not memory, then the same GPUs asked by two names.
    The other names' totals are variables only, which `_same_gpus` reads (a name over the maximum alone)."""
    if not rules.class_names:
        return []
    names = sorted({*rules.class_names, *rules.whole_gpus})
    totals = []
    for index, name in enumerate(names):
        total = _pod_rule(index, name, rules)
        totals.append(total if name in rules.class_names else Lines("[]", total.variables))
    return [*totals, *_same_gpus(rules, names)]


def _same_gpus(rules: Rules, names: list[str]) -> list[Lines]:
    """The same whole GPUs asked by two names (validate._whole_gpus: `nvidia.com/gpu` where it is whole GPUs, the
    GPU DeviceClasses' resources), after the pod totals: each container that asks more than its maximum by
    several names, none over it alone, then the pod's effective total of their sum over the per-pod maximum
    where no name's own total is, nor one container's alone over its maximum. `names`: the pod totals' (their
    variables, `total{index}`, read here)."""
    gpus = sorted(rules.whole_gpus)
    if len(gpus) < 2:
        return []
    policy, maximum, most = rules.policy, rules.max_whole_per_container, rules.max_per_pod
    asked = f"{strings(gpus)}.filter(n, {whole_key('n')} && {key_count('n')} > 0)"
    what = f"a.map(n, n + ' ' + string({key_count('n')})).join(' and ')"
    line = fill(
        validate.same_gpus_line(slot("what"), slot("total"), maximum, policy.name),
        {"what": what, "total": f"string({_summed(gpus, 'c')})"},
    )
    over = f"size(a) > 1 && {_summed(gpus, 'c')} > {maximum} && a.all(n, {key_count('n')} <= {maximum})"
    said = []
    for section in SECTIONS:
        label = fill(validate.labelled(container_label(section, 0, {"name": slot("name")}), ""), {"name": "c.name"})
        each = every(section, bind(asked, "a", f"{over} ? [{label} + {line}] : []"))
        said.append(f"{each}.filter(l, size(l) > 0).map(l, l[0])")
    k = "Same"
    variables = effective_total(k, f"{_summed(gpus, 'c')} > 0", lambda var: _summed(gpus, var))
    running, total, present = f"variables.running{k}", f"variables.total{k}", f"variables.present{k}"
    anywhere = " || ".join(
        f"(has({SPEC}.{section}) && {SPEC}.{section}.exists(c, {whole_key('n')}))" for section in SECTIONS
    )
    own = [f"variables.total{names.index(name)} > {most}" for name in gpus if name in names]
    together = f"size({running}) > 1 ? {lit(validate.together_words(2))} : {lit(validate.together_words(1))}"
    named = fill(validate.running_entry(NAME, COUNT), {"name": "c.name", "count": f"string({_summed(gpus, 'c')})"})
    sentence = validate.same_gpus_pod_line(
        slot("names"), slot("total"), slot("together"), slot("named"), most, policy.name
    )
    pod_line = fill(
        validate.labelled("pod", sentence),
        {
            "names": f"{present}.join(' and ')",
            "total": f"string({total})",
            "together": together,
            "named": f"{running}.map(c, {named}).join(', ')",
        },
    )
    conditions = [f"{total} > {most}", f"size({present}) > 1", f"!({any_of(own)})" if own else "true"]
    conditions.append(f"!(size({running}) == 1 && {total} > {maximum})")
    pod = Lines(
        f"({all_of(conditions)}) ? [{pod_line}] : []",
        (*variables, (f"present{k}", f"{strings(gpus)}.filter(n, {anywhere})")),
    )
    return [Lines(" + ".join(said)), pod]


def _summed(gpus: list[str], var: str) -> str:
    """CEL: the GPUs the container `var` asks by any of `gpus`, with no iteration (it is read inside the
    effective total's)."""
    return "(" + " + ".join(f"({whole_key(lit(name), var)} ? {key_count(lit(name), var)} : 0)" for name in gpus) + ")"


def _total_line(rules: Rules, shown: str, total: str, running: str, entry: tuple[str, str]) -> str:
    """CEL of validation's line for a pod total (`_pod_total`): `shown` (CEL, the resource as the line names it),
    `total` (a CEL int), `running` (a CEL list of those that run together at the peak), `entry` (CEL strings of
    the name and count of one of them, `c`)."""
    together = f"size({running}) > 1 ? {lit(validate.together_words(2))} : {lit(validate.together_words(1))}"
    sentence = validate.labelled(
        "pod",
        validate.pod_total_line(
            slot("shown"), slot("total"), slot("together"), slot("named"), rules.max_per_pod, rules.policy.name
        ),
    )
    named = fill(validate.running_entry(NAME, COUNT), {"name": entry[0], "count": entry[1]})
    exprs = {"shown": shown, "total": f"string({total})", "together": together, "named": f"{running}.map(c, {named})"}
    exprs["named"] += ".join(', ')"
    return fill(sentence, exprs)


# The pod totals of the resources judged by prefix (another pool's MIG resources, Intel's devices), whose names
# are the pod's: each container's such limits as entries of text, in start order, each of fields joined by a
# space (none holds one: a resource's name, a container's, a kind, a number), then each name's effective total
# from its entries.
PREFIXED = "prefixed"
SIDECAR, INIT, APP = "s", "i", "a"  # an entry's kind: its container's
_KEY, _KIND, _COUNT, _NAME, _PEAK = range(5)  # an entry's fields, by place


def _field(entry: str, index: int) -> str:
    return f"{entry}.split(' ')[{index}]"


def _prefixed_variables(rules: Rules) -> tuple[tuple[str, str], ...]:
    """The variables of the prefixed pod totals: `prefixedEntries` (one per container and such limit above 0, in
    start order: `name kind count container`, none of them holding a space; joined by commas, then split),
    `prefixedPeaks` (each with its peak appended: a regular init container's count with the sidecars' before it,
    another's own count), `prefixedNames` (each name once, at its first entry, in the order first held),
    `prefixedSorted` (the names sorted: each one's rank is the number of names below it), `prefixedLines` (each
    sorted name's line, or '')."""
    policy = rules.policy
    held = any_of([prefixed(policy), _intel_device()])
    keep = all_of([held, f"quantity({key_limit()}).isInteger()", f"{key_count()} > 0"])
    v = f"variables.{PREFIXED}"

    def entries(section: str, kind: str) -> str:
        text = f"{KEY} + ' ' + ({kind}) + ' ' + string({key_count()}) + ' ' + c.name"
        listed = f"c.resources.limits.filter({KEY}, {keep}).map({KEY}, {text}).join(',')"
        return every(section, f"{has_map('limits')} ? {listed} : ''")

    sidecar = f"has(c.restartPolicy) && c.restartPolicy == 'Always' ? {lit(SIDECAR)} : {lit(INIT)}"
    joined = f"({entries('initContainers', sidecar)} + {entries('containers', lit(APP))}).filter(s, s != '')"
    before = all_of(
        [
            f"{_field('s', _KIND)} == {lit(SIDECAR)}",
            f"{_field('s', _KEY)} == {_field('e', _KEY)}",
            f"{v}Entries.indexOf(s) < {v}Entries.indexOf(e)",
        ]
    )
    sidecars = f"{v}Entries.filter(s, {before}).map(s, int({_field('s', _COUNT)})).sum()"
    peak = f"{_field('e', _KIND)} == {lit(INIT)} ? int({_field('e', _COUNT)}) + {sidecars} : int({_field('e', _COUNT)})"
    first = f"{v}Peaks.filter(f, {_field('f', _KEY)} == {_field('e', _KEY)})[0] == e"  # the name's first entry
    return (
        (f"{PREFIXED}Entries", bind(f"{joined}.join(',')", "held", "held == '' ? [] : held.split(',')")),
        (f"{PREFIXED}Peaks", f"{v}Entries.map(e, e + ' ' + string({peak}))"),
        (f"{PREFIXED}Names", f"{v}Peaks.filter(e, {first}).map(e, {_field('e', _KEY)})"),
        (f"{PREFIXED}Ranks", f"{v}Names.map(n, size({v}Names.filter(m, m < n)))"),
        (f"{PREFIXED}Sorted", f"{v}Names.map(n, {v}Names[{v}Ranks.indexOf({v}Names.indexOf(n))])"),
        (f"{PREFIXED}Lines", f"{v}Sorted.map(n, {_prefixed_line(rules)})"),
    )


def _prefixed_line(rules: Rules) -> str:
    """CEL of the line of one prefixed name `n` (or ''), as validate._pod_total says it: its effective total from
    its entries `h` (each split into its fields), as validate.effective_total counts it."""
    v = f"variables.{PREFIXED}"
    mine = f"{v}Peaks.filter(e, {_field('e', _KEY)} == n).map(e, e.split(' '))"
    together = f"h.filter(f, f[{_KIND}] != {lit(INIT)}).map(f, int(f[{_COUNT}])).sum()"
    inits = f"h.filter(f, f[{_KIND}] == {lit(INIT)})"
    peak = f"size({inits}) > 0 ? {inits}.map(f, int(f[{_PEAK}])).max() : 0"
    # the first regular init container at the peak, with the sidecars started before it; else every sidecar and
    # app container
    at_peak = bind(
        f"{inits}.filter(f, int(f[{_PEAK}]) == p)[0]",
        "i",
        f"h.filter(f, f[{_KIND}] == {lit(SIDECAR)} && h.indexOf(f) < h.indexOf(i)) + [i]",
    )
    running = f"p > t ? {at_peak} : h.filter(f, f[{_KIND}] != {lit(INIT)})"
    # the name's per-container maximum: a MIG slice's replica's, a MIG slice's, or an Intel device's (whole GPUs)
    replica, mig, intel = (
        rules.container_maximum(name)
        for name in (MIG_PREFIX + "x" + SHARED_SUFFIX, MIG_PREFIX + "x", INTEL_PREFIX + "x")
    )
    most = f"(n.endsWith({lit(SHARED_SUFFIX)}) ? {replica} : n.startsWith({lit(MIG_PREFIX)}) ? {mig} : {intel})"
    line = _total_line(rules, "n", "total", "r", (f"c[{_NAME}]", f"c[{_COUNT}]"))
    said = f"total > {rules.max_per_pod} && !(size(r) == 1 && total > {most}) ? {line} : ''"
    with_total = bind("p > t ? p : t", "total", said)
    return bind(mine, "h", bind(together, "t", bind(peak, "p", bind(running, "r", with_total))))


def _intel_device(key: str = KEY) -> str:
    """`key` is one of Intel's GPU devices as validation counts one (not an amount of one GPU, not a replica's
    name: outside, scope.py)."""
    return all_of(
        [
            f"{key}.startsWith({lit(INTEL_PREFIX)})",
            f"!({key} in {strings(sorted(DEVICE_AMOUNTS))})",
            f"!{key}.endsWith({lit(SHARED_SUFFIX)})",
        ]
    )


def _can_hold(low: str | None, high: str | None) -> bool:
    """Whether a name judged by prefix (a MIG resource's, an Intel device's) can sort between `low` and `high`."""
    return any(
        (high is None or start < high) and (low is None or low < start or low.startswith(start))
        for start in (MIG_PREFIX, INTEL_PREFIX)
    )


def _with_prefixed(rules: Rules, names: list[str], totals: list[Lines]) -> list[Lines]:
    """`totals` (the pod totals of `names`, judged by name) with the prefixed names' lines where they sort among
    them, as validation sorts every name it says a total of: a list before each of `names` and one after the
    last, where such a name can sort there; the prefixed variables with the first."""
    v = f"variables.{PREFIXED}"
    found: list[Lines] = []
    variables = _prefixed_variables(rules)
    bounds: list[str | None] = [None, *names, None]
    for index, (low, high) in enumerate(pairwise(bounds)):
        if _can_hold(low, high):
            within = all_of([*([f"{lit(low)} < n"] if low else []), *([f"n < {lit(high)}"] if high else [])])
            said = f"{v}Sorted.filter(n, {within}).map(n, {v}Lines[{v}Sorted.indexOf(n)]).filter(s, s != '')"
            found.append(Lines(said, variables))
            variables = ()
        if index < len(totals):
            found.append(totals[index])
    assert not variables, "no name judged by prefix sorts among the names"
    return found
