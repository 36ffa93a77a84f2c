"""Memory slices (`sharing.mode: memory`) under HAMi, Volcano's vGPU and ACK: `nvidia.com/gpu` converted to the
backend's resources (memshare.convert, mutate step 2), HAMi's placement annotations (memshare.place), and
validation's lines for a container's memory and percentages (memshare.held), its GPUs' worth of memory over the
per-container maximum, and the pod's over the per-pod maximum (validate._memory_share, _memory_pod_total).

The backend's numbers are written into the expressions as constants, taken from memshare.py: its resources and
units (`spec_of`, `units_of`), what a whole GPU becomes (`whole`). A fraction below 1 is a whole number `k` of
nanos (cel.nanos), so its share is the engine's arithmetic in CEL integers: the memory `k * gpu_mib / (unit_mib
* 10^9)` and the cores `k * 100 / 10^9`, both rounded down; the least `k` that gives one unit of each is checked
against memshare.share at compile time. A GPUs' worth of memory is a CEL int in units of 1/`D` of a GPU (`D` a
common multiple of the GPU's memory in units and 100), exact for every amount memshare.held weighs; its text is
format_fraction's (fractions.formatted).

Under ACK the same: a fraction becomes `aliyun.com/gpu-mem` in whole GiB, whole GPUs stay as written; the pod
label `aliyun.com/gpu-count` that spreads a pod's memory over several GPUs is read once (spreads.py), and held's
lines read it (its memory over the label's GPUs', the label among a container's limits), as do the pod's own
lines (spreads.py: ack_pod's, ack_modes'); steering reads it where it spreads a share (native/nodes.py), and
steers whole GPUs to the exclusive pool. What is left is the webhook's (scope.py, gaps.ACK_PODS).
"""

from __future__ import annotations

from fractions import Fraction
from math import ceil, lcm
from typing import Any

from webhook.admission.base.quantity import NANO, PLACES
from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.native import spreads
from webhook.admission.native.cel import all_of, any_of, bind, fill, jsonpatch, lit, nanos, slot, strings
from webhook.admission.native.containers import SPEC, has_map, holds, pod_metadata, replaced, value
from webhook.admission.native.family import SECTIONS, ContainerRule, Family, Gap, Lines, Mutation
from webhook.admission.native.fractions import formatted
from webhook.admission.native.gaps import ACK_PODS, MEMORY_COUNTS, compiled_spec
from webhook.admission.native.maxima import any_over_maximum, class_totals, effective_total
from webhook.admission.phases import validate
from webhook.admission.phases.mutate import mutate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.memshare import (
    BACKEND_RESOURCES,
    BackendSpec,
    count_request_line,
    over_one_gpu,
    over_percent,
    over_spread_line,
    placement_annotations,
    share,
    units_of,
    whole,
)
from webhook.admission.sharing.registry import backend_of

COUNT, AMOUNT = slot("count"), slot("amount")
INT64_MAX = 2**63 - 1
# The most containers of a pod that hold an amount: the API server takes a request body of at most 3 MiB
# (MaxRequestBodyBytes, JSON, YAML and protobuf alike), and such a container takes more than 24 bytes of it (in
# protobuf, the most compact: its entry, its name's field, its resources' and one limit's, a resource name of
# at least 11 characters and its quantity's string).
MOST_CONTAINERS = 3 * 2**20 // 24


def converts(requests: dict[str, Any], limits: dict[str, Any], policy: Policy) -> bool:
    """Whether mutation converts a container of these requests and limits to the backend's resources (asked of
    the engine itself, on a pod of that one container)."""
    body = {"name": "c", "resources": {"requests": requests, "limits": limits}}
    kinds = mutate({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [body]}}, policy).kinds
    return any(kind.startswith("memory-") for kind in kinds)


def denominator(policy: Policy) -> int:
    """`D`: a GPU is D units of the GPUs' worth the compiled lines count in, exact for memory (units of the
    GPU's memory as the backend registers it) and percent alike."""
    spec = compiled_spec(policy)
    assert spec is not None
    gpu_mib = units_of(spec, policy)[0]
    return lcm(gpu_mib, 100) if gpu_mib else 100


def amount(name: str, var: str = "c") -> str:
    """memshare._amount in CEL: the container's limit of `name` as an int where it is a whole number above 0,
    else 0."""
    limit = f"quantity({value('limits', name, var)})"
    there = f"has({var}.resources) && has({var}.resources.limits) && {lit(name)} in {var}.resources.limits"
    return f"(({there} && {limit}.isInteger() && {limit}.asInteger() > 0) ? {limit}.asInteger() : 0)"


def worth(policy: Policy, var: str = "c") -> str:
    """memshare.held's GPUs' worth of memory of the container `var`, in units of 1/D of a GPU (a CEL int):
    per (v)GPU the memory over one GPU's (or the percent, or all of it where none is asked), at most one GPU,
    times the (v)GPUs; Volcano's vGPU count is 1 where memory is asked alone, and its `nvidia.com/gpu` whole
    GPUs."""
    spec = compiled_spec(policy)
    assert spec is not None
    gpu_mib, unit_mib = units_of(spec, policy)
    d = denominator(policy)
    if spec.count is None:  # ACK: its GiB of one GPU's, plus whole GPUs; nothing where it holds both
        memory = f"wm * {unit_mib * d // gpu_mib}" if gpu_mib else "0"
        weighed = f"(wm > 0 && wg > 0) ? 0 : {memory} + wg * {d}"
        return f"({bind(amount(spec.memory, var), 'wm', bind(amount(NVIDIA_GPU, var), 'wg', weighed))})"
    assert spec.count is not None and spec.percent is not None
    # each amount read once (bound), then weighed: `wm` memory, `wp` percent, `wn` count
    each_one = f"(wp > 0 ? (wp > 100 ? {d} : wp * {d // 100}) : {d})"
    if gpu_mib:  # memory * unit_mib / gpu_mib of one GPU, at most one
        most, scale = gpu_mib // unit_mib, unit_mib * d // gpu_mib
        assert unit_mib * d % gpu_mib == 0
        each_one = f"(wm > 0 ? (wm > {most} ? {d} : wm * {scale}) : {each_one})"
    if spec.counts_one_by_default:
        weighed = f"(wn > 0 ? wn : ((wm > 0 || wp > 0) ? 1 : 0)) * {each_one} + {amount(NVIDIA_GPU, var)} * {d}"
    else:
        weighed = f"wn * {each_one}"
    for name, bound in ((spec.count, "wn"), (spec.percent, "wp"), (spec.memory, "wm")):
        weighed = bind(amount(name, var), bound, weighed)
    return f"({weighed})"


def worth_text(policy: Policy, units: str) -> str:
    """format_fraction's text of a GPUs' worth `units` (a non-negative CEL int in units of 1/D)."""
    d, places = denominator(policy), 10**PLACES
    return formatted(f"({units}) / {d} * {places} + ({units}) % {d} * {places} / {d}")


def _least_nanos(spec: BackendSpec, policy: Policy) -> int | None:
    """The fewest nanos of a GPU that memshare.share converts (one unit of memory and 1% of compute), checked
    against it; None where the GPU's memory is unknown (nothing converts)."""
    gpu_mib, unit_mib = units_of(spec, policy)
    if not gpu_mib:
        return None
    least = max(ceil(Fraction(NANO * unit_mib, gpu_mib)), NANO // 100 if spec.cores else 1)
    assert share(spec, Fraction(least, NANO), gpu_mib, unit_mib).resources
    assert not share(spec, Fraction(least - 1, NANO), gpu_mib, unit_mib).resources
    return least


def _agrees() -> str:
    """`c`'s `nvidia.com/gpu` request is absent or of its limit's value (mutate._gpu_value)."""
    limit = f"quantity({value('limits', NVIDIA_GPU)})"
    return f"!({holds('requests', NVIDIA_GPU)}) || quantity({value('requests', NVIDIA_GPU)}).compareTo({limit}) == 0"


def _own_free() -> str:
    """`c` holds none of the backends' own resources (memshare.convert leaves such a container as written)."""
    names = strings(sorted(BACKEND_RESOURCES))
    return all_of(
        f"!({has_map(which)} && c.resources.{which}.exists(n, n in {names}))" for which in ("requests", "limits")
    )


def _fraction(spec: BackendSpec, policy: Policy) -> Mutation | None:
    """`nvidia.com/gpu` in (0, 1) to one vGPU of its share of the memory and compute, rounded down."""
    least = _least_nanos(spec, policy)
    if least is None:
        return None  # the fraction stays, and the API server refuses it (the webhook explains: validation)
    gpu_mib, unit_mib = units_of(spec, policy)
    assert gpu_mib is not None
    limit = value("limits", NVIDIA_GPU)
    k = nanos(limit)
    keep = all_of(
        [
            holds("limits", NVIDIA_GPU),
            f"quantity({limit}).compareTo(quantity('0')) > 0",
            f"quantity({limit}).compareTo(quantity('1')) < 0",
            _agrees(),
            _own_free(),
            f"{k} >= {least}",
        ]
    )
    numbers = {spec.memory: f"{k} * {gpu_mib} / {unit_mib * NANO}"}
    if spec.cores:
        numbers[spec.cores] = f"{k} / {NANO // 100}"
    # memshare.share's resources, in its order, at a probe: each a number of the fraction, or a constant
    probe = share(spec, Fraction(1, 2), gpu_mib, unit_mib).resources
    written = [(name, f"string({numbers[name]})" if name in numbers else lit(text)) for name, text in probe]
    assert [name for name, _ in written] == [n for n in (spec.count, spec.memory, spec.cores) if n is not None]
    resources = [(lit(name), text) for name, text in written]
    return Mutation(f"{NVIDIA_GPU} below 1 to {spec.title}'s share", " + ".join(replaced(keep, resources)))


def _whole(spec: BackendSpec, policy: Policy) -> Mutation | None:
    """`nvidia.com/gpu: N` (1 <= N <= the container maximum) to N vGPUs of all their memory and compute (ACK's
    stay as written, for its exclusive nodes)."""
    limit = value("limits", NVIDIA_GPU)
    maximum = backend_of(policy).max_per_container(policy)  # mutate._Plan.mapping_maximum
    keep = all_of(
        [
            holds("limits", NVIDIA_GPU),
            f"quantity({limit}).isInteger()",
            f"quantity({limit}).asInteger() >= 1",
            f"quantity({limit}).asInteger() <= {maximum}",
            _agrees(),
            _own_free(),
        ]
    )
    given = whole(spec, COUNT)
    if given is None:
        return None
    resources = [(lit(name), limit if text == COUNT else lit(text)) for name, text in given]
    return Mutation(f"{NVIDIA_GPU}: N to {spec.title}'s whole GPUs", " + ".join(replaced(keep, resources)))


def _placement(policy: Policy) -> Mutation | None:
    """HAMi's binpack or spread as the pod's annotations (memshare.place), where a container holds a vGPU: each
    annotation the pod does not hold with that value."""
    wanted = placement_annotations(policy)
    if not wanted:
        return None
    present, metadata, at = (f"({part})" for part in pod_metadata())
    limit = value("limits", NVIDIA_GPU)
    held = f"{holds('limits', NVIDIA_GPU)} && quantity({limit}).compareTo(quantity('0')) > 0"
    vgpu = any_of(f"has({SPEC}.{section}) && {SPEC}.{section}.exists(c, {held})" for section in SECTIONS)
    both = "{" + ", ".join(f"{lit(key)}: {lit(text)}" for key, text in wanted.items()) + "}"
    annotations = f"{metadata}.annotations"
    per_key = " + ".join(
        f"(({lit(key)} in {annotations}) && {annotations}[{lit(key)}] == {lit(text)} ? [] : ["
        + jsonpatch("add", f"{at} + {lit('/annotations/')} + jsonpatch.escapeKey({lit(key)})", lit(text))
        + "])"
        for key, text in wanted.items()
    )
    whole_metadata = jsonpatch("add", at, f"{{{lit('annotations')}: {both}}}")
    whole_annotations = jsonpatch("add", f"{at} + {lit('/annotations')}", both)
    chosen = f"!{present} ? [{whole_metadata}] : !has({annotations}) ? [{whole_annotations}] : ({per_key})"
    return Mutation("HAMi's placement annotations", f"({vgpu}) ? ({chosen}) : []")


def _count_request(spec: BackendSpec, policy: Policy) -> list[ContainerRule]:
    """memshare.held's first line: the pod label that spreads a pod's memory, among a container's limits."""
    label = spec.spread_label
    if label is None:
        return []
    return [ContainerRule(f"({holds('limits', label)}) && {spreads.HOLDS_GPU}", lit(count_request_line(policy.name)))]


def _over_memory(spec: BackendSpec, policy: Policy) -> list[ContainerRule]:
    """memshare.held's lines: the memory of one vGPU over one GPU's, a percent over 100 (in its order)."""
    gpu_mib, unit_mib = units_of(spec, policy)
    found = []
    if gpu_mib:
        line, _ = over_one_gpu(spec, policy, AMOUNT)
        memory, most = amount(spec.memory), gpu_mib // unit_mib
        one = fill(line, {"amount": f"string({memory})"})
        if spec.spread_label is None:
            found.append(ContainerRule(f"{memory} > {most}", one))
        else:  # one GPU's, or the label's GPUs' (held)
            gpus = spreads.GPUS
            found.append(ContainerRule(f"{gpus} == 1 && {memory} > {most}", one))
            model = policy.gpu.model or "GPU"
            spread = over_spread_line(slot("memory"), slot("gpus"), slot("most"), model, policy.name)
            said = {"memory": f"string({memory})", "gpus": f"string({gpus})", "most": f"string({gpus} * {most})"}
            found.append(ContainerRule(f"{gpus} > 1 && {memory} > {gpus} * {most}", fill(spread, said)))
    for name in (spec.percent, spec.cores):
        if name is None:
            continue  # ACK: GiB alone
        line, _ = over_percent(name, AMOUNT, policy)
        found.append(ContainerRule(f"{amount(name)} > 100", fill(line, {"amount": f"string({amount(name)})"})))
    return found


def _over_container(spec: BackendSpec, policy: Policy) -> ContainerRule:
    """validate._memory_share: the container's GPUs' worth over the per-container maximum, unless a count it holds
    is over its maximum (that count's line says it): the backend's, `nvidia.com/gpu`, or any other."""
    rules = Rules.of(policy)
    maximum = rules.max_whole_per_container
    over_count = any_over_maximum(rules)
    held = worth(policy)
    sentence = validate.memory_container_line(slot("worth"), str(spec.backend), maximum, policy.name)
    condition = f"{held} > {maximum * denominator(policy)} && !({over_count})"
    return ContainerRule(condition, bind(held, "w", fill(sentence, {"worth": worth_text(policy, "w")})))


def _pod_total(spec: BackendSpec, policy: Policy) -> Lines:
    """validate._memory_pod_total: the pod's effective GPUs' worth (with sidecars, KEP-753) over the per-pod
    maximum, unless one container holds it all and is over its own maximum."""
    rules = Rules.of(policy)
    d, k = denominator(policy), "m"
    variables = effective_total(k, f"{worth(policy)} > 0", lambda var: worth(policy, var))
    running, total = f"variables.running{k}", f"variables.total{k}"
    entry = fill(
        validate.running_entry(slot("name"), slot("worth")),
        {"name": "c.name", "worth": worth_text(policy, worth(policy))},
    )
    together = f"size({running}) > 1 ? {lit(validate.together_words(2))} : {lit(validate.together_words(1))}"
    sentence = validate.labelled(
        "pod",
        validate.memory_pod_total_line(
            slot("total"), slot("together"), slot("named"), rules.max_per_pod, policy.name, str(spec.backend)
        ),
    )
    line = fill(
        sentence,
        {"total": worth_text(policy, total), "together": together, "named": f"{running}.map(c, {entry}).join(', ')"},
    )
    alone = f"size({running}) == 1 && {total} > {rules.max_whole_per_container * d}"
    over = f"{total} > {rules.max_per_pod * d} && !({alone})"
    return Lines(f"({over}) ? [{line}] : []", variables)


class MemoryShares(Family):
    name = "memory shares"

    def mutations(self, policy: Policy) -> list[Mutation]:
        spec = compiled_spec(policy)
        if spec is None:
            return []
        found = [_fraction(spec, policy), _whole(spec, policy), _placement(policy)]
        return [mutation for mutation in found if mutation is not None]

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        spec = compiled_spec(policy)
        if spec is None:
            return []
        return [*_count_request(spec, policy), *_over_memory(spec, policy), _over_container(spec, policy)]

    def lines(self, policy: Policy) -> list[Lines]:
        spec = compiled_spec(policy)
        if spec is None:
            return []
        total, classes = _pod_total(spec, policy), class_totals(Rules.of(policy))
        if spec.spread_label is None:
            return [total, *classes]
        read = spreads.variables(spec, amount)
        spread = spreads.spread_lines(spec, policy, amount)
        return [Lines(total.lines, (*read, *total.variables)), *spread, *classes]

    def gaps(self, policy: Policy) -> list[Gap]:
        spec = compiled_spec(policy)
        if spec is None:
            return []
        return [MEMORY_COUNTS, ACK_PODS] if spec.spreads_pods else [MEMORY_COUNTS]


def most_count(policy: Policy) -> int:
    """A count of (v)GPUs or ACK's GiB in one container below this keeps every integer of the compiled lines
    within CEL's int64 (scope.py leaves a larger one to the webhook: gaps.MEMORY_COUNTS). A container's GPUs'
    worth (`worth`) is at most two `unbounded` amounts, each times at most `m` (D, or ACK's units of 1/D per
    GiB), every other amount capped first; the pod's total (`_pod_total`) sums at most MOST_CONTAINERS of them;
    its text (`worth_text`) is at most total / D * 10^4 + D * 10^4. The other lines read the amounts alone, or
    their sum (spreads.py), which is less."""
    spec = compiled_spec(policy)
    assert spec is not None
    gpu_mib, unit_mib = units_of(spec, policy)
    d, places = denominator(policy), int(10**PLACES)
    m = max(d, unit_mib * d // gpu_mib if gpu_mib and spec.count is None else 0)
    room = INT64_MAX - d * places  # the text's remainder part
    return max(0, room // (2 * MOST_CONTAINERS * max(m, m * places // d + 1)))


def unbounded(policy: Policy) -> frozenset[str]:
    """The amounts a GPUs' worth multiplies without a cap (kept below most_count: scope.py): the counts of
    devices, and ACK's GiB."""
    spec = compiled_spec(policy)
    assert spec is not None
    return frozenset(name for name in (NVIDIA_GPU, spec.count, spec.memory if spec.count is None else None) if name)
