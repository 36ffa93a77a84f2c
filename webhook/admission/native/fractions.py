"""`fractional: shared` under time-slicing and MPS: `nvidia.com/gpu` below 1 (`250m`, `0.5`) becomes one shared
replica (mutate.py step 2, `_fractional`), renamed to `nvidia.com/gpu.shared: "1"` in requests and limits by JSON
Patch (an apply configuration cannot remove a key). Mutating policies run before the API server's own
validation, so the rename comes before its "must be an integer". The fraction is recorded in the container
(mutate.RECORDED_FRACTION) and the memory variables of its share, at most one replica's, are appended (step 4,
`_env`); validation's line for a fraction over one replica's share (`_within_share`) is read back from the record.

A quantity below 1 is a whole number `k` of nanos (the API server rounds a finer one up to 1n: quantity.py), so
CEL gets the fraction exactly as an integer: `quantity(...).asApproximateFloat()` times 10^9, rounded (its error
is far below half a nano). The variables' names and order, and the values that do not depend on the fraction,
are the engine's (`hints_for`); above one replica's share its values for that share, whole. Those that depend on
the fraction are the text the engine writes around a number (read from its values at a probe fraction, and
checked at others), the number being the engine's over `k` in integers (`_numbers`, one per variable name:
format_fraction rounding down, whole_percent, MPS's MiB, JAX's headroom). Under `memoryFraction` the variables
are the policy's own whatever the fraction (mutate._env), uncapped. A policy with a variable none of them writes
is a gap: the native set leaves those fractions as written, and the API server refuses them as not an integer.

Validation reads the recorded fraction back: its line for one over one replica's share (`_within_share`), then
its lines for the memory variables judged against a recorded fraction below that share (`_memory_variables`:
memvars.py, which reads the recorded fraction with `recorded_fraction` and the value each line tells the user to
write with `suggestions`: envhints.memory_value at the recorded fraction, in the same integers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from webhook.admission.base.envnames import (
    CUPY_LIMIT,
    GENERIC_FRACTION,
    JAX_FRACTION_VARS,
    MPS_MEMORY_LIMIT,
    MPS_THREAD_PERCENTAGE,
    PYTORCH_ALLOC_CONF,
    PYTORCH_CUDA_ALLOC_CONF,
    TGI_FRACTION,
    whole_percent,
)
from webhook.admission.base.quantity import NANO, PLACES, format_fraction
from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.native.cel import all_of, bind, fill, jsonpatch, lit, nanos, slot
from webhook.admission.native.commandline import runs_engine
from webhook.admission.native.containers import any_managed, each_of, holds, path, replaced, value
from webhook.admission.native.family import SECTIONS, ContainerRule, Family, Gap, Mutation
from webhook.admission.native.gaps import FRACTION_VARIABLES, shape
from webhook.admission.native.userenv import HELD, HOLDERS, IDLE, appends, merges, over_holders, readings, sets
from webhook.admission.phases import validate
from webhook.admission.phases.envhints import MEMORY_VARIABLES, hints_for, jax_fraction, memory_value
from webhook.admission.phases.mutate import RECORDED_FRACTION, mps_only
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Fractional, Policy
from webhook.admission.sharing.registry import backend_of

PERCENT = Fraction(1, 100)  # envnames.whole_percent writes at least 1%: a fraction below it is told more
Formula = Callable[[str], str]  # CEL for a variable's value, of the CEL int of nanos


def _padded(number: str, width: int) -> str:
    """The non-negative CEL int `number` (below 10^width) as `width` digits, zeros in front."""
    zeros = " + ".join(f"({number} < {10**i} ? '0' : '')" for i in range(1, width))
    return f"{zeros} + string({number})" if zeros else f"string({number})"


def places(d: str) -> str:
    """The digits after format_fraction's point for `d` (a CEL int in (0, 10^PLACES), in units of 10^-PLACES):
    PLACES of them, its trailing zeros dropped."""
    choices = "'0'"
    for width in range(PLACES, 0, -1):  # the fewest digits that say it, tried first
        step = 10 ** (PLACES - width)
        digits = _padded(f"({d} / {step})", width)
        choices = digits if width == PLACES else f"{d} % {step} == 0 ? {digits} : ({choices})"
    return choices


def decimal(numerator: str, denominator: int) -> str:
    """format_fraction(numerator / denominator) for a value in [0, 1) (a CEL string): rounded down to PLACES
    decimal places, its trailing zeros dropped, "0" for nothing."""
    unit = 10**PLACES
    assert denominator % unit == 0, "a denominator that PLACES decimal places divide"
    return bind(f"({numerator}) / {denominator // unit}", "d", f"d == 0 ? '0' : '0.' + ({places('d')})")


def formatted(units: str) -> str:
    """format_fraction of a non-negative value `units` (a CEL int) in units of 10^-PLACES, whole part and all."""
    unit = 10**PLACES
    fraction = bind(f"u % {unit}", "d", f"d == 0 ? '' : '.' + ({places('d')})")
    return bind(units, "u", f"string(u / {unit}) + {fraction}")


def _percent(k: str) -> str:
    """envnames.whole_percent of k nanos: the whole percent, rounded down, at least 1."""
    return bind(f"{k} / {int(NANO * PERCENT)}", "p", "p < 1 ? 1 : p")


def _jax(memory: int | None) -> Formula:
    """envhints.jax_fraction of k nanos, written: the fraction less the headroom, else half of it. The headroom
    is the engine's (what jax_fraction takes from a whole GPU)."""
    headroom = Fraction(1) - jax_fraction(Fraction(1), memory)
    a, b = headroom.numerator, headroom.denominator

    def formula(k: str) -> str:
        lowered = f"{k} * {b} - {a * NANO}"
        return f"({lowered} > 0) ? ({decimal(lowered, NANO * b)}) : ({decimal(k, 2 * NANO)})"

    return formula


@dataclass(frozen=True, slots=True)
class Number:
    """The number in a variable's value that depends on the fraction: as CEL of k nanos (a string), and as the
    engine writes it for a fraction (its own functions)."""

    cel: Formula
    engine: Callable[[Fraction], str]


def _numbers(policy: Policy) -> dict[str, Number]:
    """The number in each variable whose value depends on the fraction (the text around it is the engine's)."""
    memory = policy.gpu_memory_mib
    written = Number(lambda k: decimal(k, NANO), format_fraction)
    percent = Number(lambda k: f"string({_percent(k)})", lambda f: str(whole_percent(f)))
    found = {
        GENERIC_FRACTION: written,
        TGI_FRACTION: written,
        PYTORCH_CUDA_ALLOC_CONF: written,
        PYTORCH_ALLOC_CONF: written,  # read by validation alike (envhints.memory_value); never a hint of its own
        CUPY_LIMIT: percent,
        MPS_THREAD_PERCENTAGE: percent,
    }
    for name in JAX_FRACTION_VARS:  # both are read alike (envhints.memory_value); the policy writes the first
        found[name] = Number(_jax(memory), lambda f: format_fraction(jax_fraction(f, memory)))
    if memory:  # MPS's pinned memory: the MiB of the GPU's memory, rounded down
        found[MPS_MEMORY_LIMIT] = Number(lambda k: f"string({k} * {memory} / {NANO})", lambda f: str(int(f * memory)))
    return found


# Fractions at which the engine's variables are read: the text around a variable's number is its value at the
# first, and every probe must give the same text around its own number; a value with no number is the same at
# each (a constant).
PROBES = (Fraction(1, 2), Fraction(1, NANO), Fraction(1, 7), Fraction(NANO - 1, NANO))
NUMBER = slot("number")


def _entries(policy: Policy) -> list[tuple[str, Formula | str]] | None:
    """The engine's variables for a converted fraction, in its order: (name, formula or constant value); None
    where one depends on the fraction in a way `_numbers` does not write. Under `memoryFraction` each is the
    policy's own, the same whatever the fraction (mutate._env)."""
    if policy.memory_fraction is not None:
        return [(hint.name, hint.value) for hint in hints_for(policy, policy.memory_fraction)]
    numbers = _numbers(policy)
    share = Rules.of(policy).share
    fractions = (*PROBES, *([share] if share is not None else []))
    probed = [hints_for(policy, probe) for probe in fractions]
    if len({tuple(hint.name for hint in hints) for hints in probed}) != 1:
        return None
    entries: list[tuple[str, Formula | str]] = []
    for at, hint in enumerate(probed[0]):
        number = numbers.get(hint.name)
        if number is None:
            if len({hints[at].value for hints in probed}) != 1:
                return None
            entries.append((hint.name, hint.value))
            continue
        text = number.engine(fractions[0])
        if hint.value.count(text) != 1:
            return None
        template = hint.value.replace(text, NUMBER)
        if any(
            hints[at].value != template.replace(NUMBER, number.engine(f))
            for f, hints in zip(fractions, probed, strict=True)
        ):
            return None
        entries.append((hint.name, _around(template, number)))
    return entries


def _around(template: str, number: Number) -> Formula:
    """The CEL of a value: the engine's text around its number, the number of k nanos."""
    return lambda k: fill(template, {"number": number.cel(k)})


def _suggested(policy: Policy, name: str) -> Formula | None:
    """envhints.memory_value of `name` for a share of k nanos (what validation's line tells the user to write),
    read from the engine's values at the probes as `_entries` reads the variables; None where `_numbers` does
    not write it."""
    number = _numbers(policy).get(name)
    memory = policy.gpu_memory_mib
    if number is None:
        return None
    template = memory_value(name, PROBES[0], memory).replace(number.engine(PROBES[0]), NUMBER, 1)
    if NUMBER not in template or any(
        memory_value(name, f, memory) != template.replace(NUMBER, number.engine(f)) for f in PROBES
    ):
        return None
    return _around(template, number)


def suggestions(policy: Policy) -> dict[str, Formula] | None:
    """The value validation's line tells the user to write at a converted fraction of k nanos (`_suggested`), for
    each variable the native set judges there (memvars.py): those `userenv.readings` reads, and the policy's own;
    None where one cannot be written, or where `readings` reads none (a share past its integers)."""
    backend = backend_of(policy)
    read = readings(policy)
    if not read and Rules.of(policy).share is not None:
        return None  # the values mutation writes (CuPy's 1% over a fraction below it) would go unjudged
    names = [*read, *(name for name, _ in Rules.of(policy).own_memory_values)]
    found: dict[str, Formula] = {}
    for name in dict.fromkeys(names):
        if name not in MEMORY_VARIABLES or not backend.judges_variable(name):
            continue
        suggested = _suggested(policy, name)
        if suggested is None:
            return None
        found[name] = suggested
    return found


def unsupported(policy: Policy) -> Gap | None:
    """Why fractions are not compiled for this `fractional: shared` policy at all, or None."""
    return FRACTION_VARIABLES if _entries(policy) is None or suggestions(policy) is None else None


def compiled(policy: Policy) -> bool:
    """Fractions of `nvidia.com/gpu` become shared replicas in this policy's native set."""
    return shape(policy) == "shared" and policy.fractional is Fractional.SHARED and unsupported(policy) is None


def fraction_gap(policy: Policy, fractions: list[Fraction]) -> Gap | None:
    """The gap that keeps a container asking `fractions` of `nvidia.com/gpu` out of the native set (scope.py)."""
    if not fractions or policy.fractional is not Fractional.SHARED:
        return None
    return unsupported(policy)


def _entry(name: str, written: str) -> str:
    """An env entry (a CEL map) whose value is the CEL string `written`."""
    return f"{{{lit('name')}: {lit(name)}, {lit('value')}: {written}}}"


def converts(policy: Policy) -> str:
    """CEL of `c`: its `nvidia.com/gpu` is a fraction that mutation converts to a shared replica (step 2): in
    (0, 1), the request equal to the limit, and no replica held already."""
    target = Rules.of(policy).shared_resource
    assert target is not None
    limit = value("limits", NVIDIA_GPU)
    terms = [
        holds("limits", NVIDIA_GPU),
        f"!({holds('requests', target)})",
        f"!({holds('limits', target)})",
        f"quantity({limit}).compareTo(quantity('0')) > 0",
        f"quantity({limit}).compareTo(quantity('1')) < 0",
        f"!({holds('requests', NVIDIA_GPU)}) || quantity({value('requests', NVIDIA_GPU)}).compareTo("
        f"quantity({limit})) == 0",
    ]
    return all_of(terms)


def headroom(policy: Policy) -> Number:
    """JAX's fraction of a share (envhints.jax_fraction: the share less the CUDA context's headroom), which an
    inference engine's memory flag is written with too (engineflags.py)."""
    return _numbers(policy)[JAX_FRACTION_VARS[0]]


class FractionalShares(Family):
    name = "fractional shares"

    def gaps(self, policy: Policy) -> list[Gap]:
        if shape(policy) != "shared" or policy.fractional is not Fractional.SHARED:
            return []
        gap = unsupported(policy)
        return [gap] if gap is not None else []

    def mutations(self, policy: Policy) -> list[Mutation]:
        if not compiled(policy):
            return []
        rules = Rules.of(policy)
        target = rules.shared_resource
        entries = _entries(policy)
        assert target is not None and entries is not None
        limit, k = value("limits", NVIDIA_GPU), "k"
        converted = converts(policy)
        # The recorded fraction, then each variable of the fraction, or of one replica's share where the fraction
        # is more (mutate._env caps it: the share's values are the engine's, written here as they are); under
        # memoryFraction the policy's own, whatever the fraction.
        share = rules.share if policy.memory_fraction is None else None
        written = [(RECORDED_FRACTION, decimal(k, NANO), True)]
        capped = hints_for(policy, share) if share is not None else ()
        for place, (name, formula) in enumerate(entries):
            reads = not isinstance(formula, str)  # whether its text reads k
            text = formula(k) if not isinstance(formula, str) else lit(formula)
            if share is not None and capped[place].value != formula:
                under = f"{k} * {share.denominator} <= {share.numerator * NANO}"
                text, reads = f"({under}) ? ({text}) : {lit(capped[place].value)}", True
            written.append((name, text, reads))
        listed = bind(nanos(limit), k, "[" + ", ".join(_entry(name, text) for name, text, _ in written) + "]")
        # Three mutations, run in order on the object as patched so far: the variables while the fraction is there
        # to read, a section's each (a section's operations read its own containers alone: two mutations give
        # what one would, at half the length), then the rename. Each finds a section's converted containers once.
        # A container that runs an inference engine gets the recorded fraction and the MPS variables alone.
        engine = runs_engine()
        probed = hints_for(policy, policy.memory_fraction or PROBES[0])
        kept = {RECORDED_FRACTION, *(hint.name for hint in mps_only(probed))}
        if any(name not in kept for name, _, _ in written):
            alone = [_entry(name, text) for name, text, _ in written if name in kept]
            listed = f"({engine}) ? ({bind(nanos(limit), k, '[' + ', '.join(alone) + ']')}) : ({listed})"
        env = []
        for section in SECTIONS:  # the env list whole where there is none, else each entry appended
            # the section's converted containers found once, then those with an env, and of those the ones that
            # run no engine (userenv.over_holders, as replicas.py does)
            ops = [each_of(HOLDERS, "!has(c.env)", jsonpatch("add", path(section, "/env"), listed))]
            for name, text, of_k in written:
                entry = bind(nanos(limit), k, _entry(name, text)) if of_k else _entry(name, text)
                added = jsonpatch("add", path(section, "/env/-"), entry)
                unset = f"!({sets([name])})" if name == RECORDED_FRACTION else appends(name)
                among = HELD if name in kept else IDLE
                ops.append(each_of(among, unset, added))
                if name == PYTORCH_CUDA_ALLOC_CONF:  # or merged into the container's own config
                    ops.append(merges(section, among, "true", bind(nanos(limit), k, text) if of_k else text))
            idle = engine if any(name not in kept for name, _, _ in written) else None
            env.append((section, over_holders(section, converted, ops, idle)))
        renamed = replaced(converted, [(lit(target), "'1'")])  # "1" in each map that held it, as _rename does
        return [
            *(Mutation(f"the memory variables of {NVIDIA_GPU} below 1 in {section}", ops) for section, ops in env),
            Mutation(f"{NVIDIA_GPU} below 1 to {target}", " + ".join(renamed)),
        ]

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        """validate._within_share: the container's first recorded fraction, as mutation writes it, over one
        replica's share (the memory variables' lines after it: memvars.py)."""
        rules = Rules.of(policy)
        share = rules.share
        if not compiled(policy) or share is None:
            return []
        condition, recorded, asked = recorded_fraction(any_managed())
        policy_ = rules.policy
        mode, replicas, name = policy_.sharing.mode, policy_.sharing.replicas, policy_.name
        sentence = validate.over_share_line(slot("asked"), mode, replicas, name, format_fraction(share))
        over = all_of([condition, f"{asked} * {share.denominator} > {share.numerator * 10**PLACES}"])
        return [ContainerRule(over, fill(sentence, {"asked": recorded}))]


RECORDED = f"has(e.name) && e.name == {lit(RECORDED_FRACTION)}"  # an env entry `e` is a recorded fraction
WRITTEN = lit(rf"^0\.[0-9]{{0,{PLACES - 1}}}[1-9]$")  # format_fraction's text for a value in (0, 1)


def recorded_units(first: str) -> str:
    """The recorded fraction in the env entry `first` (as mutation writes it) in units of 10^-PLACES (a CEL int)."""
    return f"int(quantity({first}.value).asApproximateFloat() * {float(10**PLACES)} + 0.5)"


def recorded_fraction(holder: str) -> tuple[str, str, str]:
    """CEL of a container `c` (a `holder`) whose first recorded fraction is as mutation writes it
    (format_fraction's text for a value in (0, 1)): the condition, its text and its value in units of
    10^-PLACES (an int)."""
    first = f"c.env.filter(e, {RECORDED})[0]"
    condition = all_of(
        [
            holder,
            f"has(c.env) && c.env.exists(e, {RECORDED})",
            f"has({first}.value) && {first}.value.matches({WRITTEN})",
        ]
    )
    return condition, f"{first}.value", recorded_units(first)
