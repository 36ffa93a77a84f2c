"""A memory backend that reads a pod as a whole (BackendSpec.spreads_pods: ACK GPU sharing): the pod label that
spreads its memory over several GPUs (memshare.pod_gpus), read once into variables, and validation's pod lines
about it (memshare.ack_pod, ack_modes), each said with the engine's own template.

The label is a number of at most MOST_LABEL_DIGITS digits, as pod_gpus reads it; the rest is CEL integers on the
containers' amounts (each below memshares.most_count: scope.py), the backend's memory per GPU and the per-pod
maximum written in as constants. Steering reads the label too (`several_gpus`: native/nodes.py), for a share
spread over several GPUs (ACK's multi-GPU sharing, which not every pool serves).
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.native.cel import any_of, bind, fill, lit, slot
from webhook.admission.native.containers import SPEC, any_managed, pod_metadata
from webhook.admission.native.family import SECTIONS, Lines
from webhook.admission.phases import validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.memshare import (
    MOST_LABEL_DIGITS,
    SHOWN_LABEL,
    BackendSpec,
    both_modes_line,
    held_entry,
    label_not_number_line,
    one_gpu_total_line,
    spread_instead,
    spread_over_maximum_line,
    spread_total_line,
    two_modes_line,
    uneven_spread_line,
    units_of,
)

# The pod holds a resource the webhook manages, so that the webhook judges it at all (podspec.mentions_gpu;
# scope.py keeps outside a pod it judges for a device path or variable alone).
HOLDS_GPU = "variables.holdsgpu"
GPUS = "variables.spreadgpus"  # the GPUs the pod's memory spreads over: the label's number, else 1
METADATA = "variables.spreadmetadata"  # the pod's metadata (a template's), or an empty map
LABEL, NAMED, NUMBER = "variables.spreadlabel", "variables.spreadnamed", "variables.spreadnumber"
HELD, TOTAL = "variables.spreadheld", "variables.spreadtotal"  # the app containers holding memory, its sum
SHARES, ALL = "variables.spreadshares", "variables.spreadall"  # every container holding memory; every container

Amount = Callable[[str, str], str]  # memshares.amount: (resource, container variable) -> a CEL int


def _name(variable: str) -> str:
    return variable.removeprefix("variables.")


def variables(spec: BackendSpec, amount: Amount) -> tuple[tuple[str, str], ...]:
    """The pod's label and amounts, read once (before every line that reads them: the containers' too)."""
    label = spec.spread_label
    assert label is not None
    _, metadata, _ = pod_metadata()
    labels = f"{METADATA}.labels"
    held = any_of(f"has({SPEC}.{section}) && {SPEC}.{section}.exists(c, {any_managed()})" for section in SECTIONS)
    every = " + ".join(f"(has({SPEC}.{section}) ? {SPEC}.{section} : [])" for section in SECTIONS)
    memory = amount(spec.memory, "c")
    return (
        (_name(HOLDS_GPU), held),
        (_name(METADATA), metadata),
        (_name(NAMED), f"has({labels}) && {lit(label)} in {labels}"),
        (_name(LABEL), f"{NAMED} ? {labels}[{lit(label)}] : ''"),
        (_name(NUMBER), f"{NAMED} && {_number(LABEL)} && int({LABEL}) >= 1"),
        (_name(GPUS), f"{NUMBER} ? int({LABEL}) : 1"),
        (_name(HELD), f"has({SPEC}.containers) ? {SPEC}.containers.filter(c, {memory} > 0) : []"),
        (_name(TOTAL), f"{HELD}.map(c, {memory}).sum()"),
        (_name(ALL), every),
        (_name(SHARES), f"{ALL}.filter(c, {memory} > 0)"),
    )


def _number(text: str) -> str:
    """The label's value `text` is a number as pod_gpus reads one: at most MOST_LABEL_DIGITS ASCII digits (the
    API server allows no other characters in a label value)."""
    return f"{text}.matches({lit(f'^[0-9]{{1,{MOST_LABEL_DIGITS}}}$')})"


def several_gpus(spec: BackendSpec) -> str:
    """The pod's label spreads its memory over more than one GPU (pod_gpus), read from the object itself: for
    steering's mutation, whose policy has none of the variables above."""
    label = spec.spread_label
    assert label is not None
    labels = f"({pod_metadata()[1]}).labels"
    value = f"{labels}[{lit(label)}]"
    return f"has({labels}) && {lit(label)} in {labels} && {_number(value)} && int({value}) > 1"


def _pod(sentence: str, exprs: dict[str, str]) -> str:
    return fill(validate.labelled("pod", sentence), exprs)


def label_line(policy: Policy) -> str:
    """pod_gpus's line: a label that is no whole number of GPUs, its first SHOWN_LABEL characters shown."""
    shown = f"size({LABEL}) > {SHOWN_LABEL} ? {LABEL}.substring(0, {SHOWN_LABEL}) : {LABEL}"
    line = _pod(label_not_number_line(slot("shown"), policy.name), {"shown": shown})
    return f"({HOLDS_GPU} && {NAMED} && !{NUMBER}) ? [{line}] : []"


def pod_lines(spec: BackendSpec, policy: Policy, amount: Amount) -> str:
    """ack_pod's lines, then ack_modes': a CEL list of strings."""
    maximum = Rules.of(policy).max_per_pod
    shown = {"gpus": f"string({GPUS})", "total": f"string({TOTAL})"}
    over = _pod(spread_over_maximum_line(slot("gpus"), maximum, policy.name), shown)
    uneven = _pod(uneven_spread_line(slot("total"), slot("gpus"), policy.name), shown)
    said = [
        f"({TOTAL} > 0 && {GPUS} > {maximum}) ? [{over}] : []",
        f"({TOTAL} > 0 && {TOTAL} % {GPUS} != 0) ? [{uneven}] : []",
    ]
    over_gpus = _over_gpus(spec, policy, amount)
    if over_gpus:
        said.append(over_gpus)
    said.append(_modes(spec, policy, amount))
    return " + ".join(f"({part})" for part in said)


def _over_gpus(spec: BackendSpec, policy: Policy, amount: Amount) -> str | None:
    """ack_pod's last line: several containers' memory, from each of the label's GPUs, over one GPU's; None where
    the policy does not know the GPU's memory (the engine says nothing then)."""
    gpu_mib, unit_mib = units_of(spec, policy)
    gib = gpu_mib // unit_mib if gpu_mib else 0
    if not gib:
        return None  # a GPU of less than one unit: scope.py keeps such a pod outside
    maximum = Rules.of(policy).max_per_pod
    model = policy.gpu.model or "GPU"
    memory = amount(spec.memory, "c")
    entry = fill(held_entry(slot("name"), slot("amount")), {"name": "c.name", "amount": f"string({memory})"})
    named = f"{HELD}.map(c, {entry}).join(', ')"
    # the fewest GPUs within the maximum (and 64 past the least) that take the total in equal whole GiB
    offsets = "[" + ", ".join(str(i) for i in range(min(65, maximum))) + "]"
    least = f"(({TOTAL} + {gib - 1}) / {gib})"
    fits = f"{offsets}.filter(i, {least} + i <= {TOTAL} && {least} + i <= {maximum} && {TOTAL} % ({least} + i) == 0)"
    more = fill(spread_instead(slot("more")), {"more": f"string({least} + f[0])"})
    instead = bind(fits, "f", f"size(f) > 0 ? {more} : ''")
    common = {"total": f"string({TOTAL})", "named": named, "instead": instead}
    one = _pod(one_gpu_total_line(slot("total"), slot("named"), model, gib, policy.name, slot("instead")), common)
    texts = (slot("total"), slot("named"), slot("gpus"), slot("each"), slot("most"))
    sentence = spread_total_line(*texts, model, gib, policy.name, slot("instead"))
    each = {"gpus": f"string({GPUS})", "each": f"string({TOTAL} / {GPUS})", "most": f"string({GPUS} * {gib})"}
    several = _pod(sentence, {**common, **each})
    condition = f"{TOTAL} > 0 && {TOTAL} % {GPUS} == 0 && {TOTAL} / {GPUS} > {gib} && size({HELD}) > 1"
    return f"({condition}) ? [{GPUS} == 1 ? {one} : {several}] : []"


def _modes(spec: BackendSpec, policy: Policy, amount: Amount) -> str:
    """ack_modes's line: a container holding a share and whole GPUs (the first), else the first container
    holding a share and the first holding whole GPUs."""

    def memory(var: str) -> str:
        return amount(spec.memory, var)

    def whole(var: str) -> str:
        return amount(NVIDIA_GPU, var)

    both = f"{SHARES}.filter(c, {whole('c')} > 0)"
    one = fill(
        validate.labelled("pod", both_modes_line(slot("name"), slot("memory"), slot("gpus"), policy.name)),
        {"name": "b.name", "memory": f"string({memory('b')})", "gpus": f"string({whole('b')})"},
    )
    wholes = f"{ALL}.filter(c, {whole('c')} > 0)"
    two = fill(
        validate.labelled("pod", two_modes_line(slot("share"), slot("whole"), policy.name)),
        {"share": f"{SHARES}[0].name", "whole": f"{wholes}[0].name"},
    )
    apart = f"{ALL}.exists(c, {whole('c')} > 0) ? [{two}] : []"  # SHARES holds one here
    said = f"size(x) > 0 ? {bind('x[0]', 'b', f'[{one}]')} : ({apart})"
    return f"size({SHARES}) > 0 ? {bind(both, 'x', said)} : []"


def spread_lines(spec: BackendSpec, policy: Policy, amount: Amount) -> list[Lines]:
    """The label's line and the pod's, after the pod's total (validate._MemoryPod.pod)."""
    return [Lines(f"({label_line(policy)}) + ({pod_lines(spec, policy, amount)})")]
