"""A quantity within a thousandth below a whole number (`nvidia.com/gpu: 0.9999999`) that mutation leaves as
written: the API server's own validation reads milli-units rounded up and takes it as whole, so the object
reaches the ValidatingAdmissionPolicy, whose line refuses it as fractional as validation does (validate._resource,
fractional_line; for `nvidia.com/gpu` the policy's advice, fraction_advice, where it depends on the value only as
MIG's on a known model does: how much of the GPU, to 4 places).
Under mode memory that is the backend's own counts and amounts (vGPUs, memory, percentages), whose line is
fractional_line whatever the backend, and `nvidia.com/gpu` past one GPU where the backend's advice is the same at
every such value (HAMi's, Volcano's; below one, mutation converts it).

The API server sends a quantity in its canonical form: such a value as digits of nanos or micros (`999999900n`,
`999500u`; `999999900e-9` where it was written with an exponent). CEL reads the text, not quantity's
`isInteger()` (false for any value of a negative scale, a whole `1000000000n` among them): it is fractional where
a digit among its last 9 (6) is not 0, and its value is written as format_fraction writes it to 9 places (exact
to 1n), its trailing zeros dropped. Another text (`0.9999999`, which the API server never sends), and
`nvidia.com/gpu` where the advice turns on the value otherwise (the memory backends' shares), are outside
(scope.py).

Validation says such a line at the resource's place in the order of the names, before any other of its lines and
after those of every lesser name: the maxima (maxima.py) say each name's rule here at that place, and each prefix's
at the prefix's place.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from fractions import Fraction

from webhook.admission.base.quantity import NANO, PLACES, format_fraction, quantity_shown
from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.native.cel import all_of, any_of, bind, fill, lit, slot, strings
from webhook.admission.native.containers import has_map
from webhook.admission.native.family import ContainerRule
from webhook.admission.native.gaps import compiled_spec, shape
from webhook.admission.phases import validate
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.memshare import ack_past_one_line, units_of

# The canonical suffixes of a value finer than a milli-unit, and the decimal places they stand for.
CANONICAL = {"n": 9, "e-9": 9, "u": 6, "e-6": 6}
PATTERNS = {
    suffix: f"([1-9][0-9]*)?[1-9][0-9]{{0,{places - 1}}}{re.escape(suffix)}" for suffix, places in CANONICAL.items()
}
# Values that probe whether a line depends on the value (the compiled one must not).
PROBES = (Fraction(999999999, NANO), Fraction(1999999999, NANO), Fraction(12345999999, 10**6))
_PROBE_TEXT, _PROBE = "999999900n", Fraction(999999900, NANO)


def fractional_text(text: object) -> bool:
    """Whether `text` is a canonical quantity that is not whole (the compiled line reads it)."""
    return isinstance(text, str) and any(re.fullmatch(pattern, text) for pattern in PATTERNS.values())


def _fractional(text: str) -> str:
    """CEL: the quantity string `text` is one `fractional_text` takes."""
    return f"{text}.matches({lit('^(?:' + '|'.join(PATTERNS.values()) + ')$')})"


def _by_suffix(text: str, numbers: dict[str, int]) -> str:
    """CEL: the int `numbers` gives the suffix the canonical `text` ends with."""
    chosen = "0"
    for suffix, number in numbers.items():
        chosen = f"{text}.endsWith({lit(suffix)}) ? {number} : ({chosen})"
    return f"({chosen})"


def _value(text: str) -> str:
    """CEL: format_fraction(value, 9) of the canonical `text`, as quantity_shown writes its value: its digits, a
    point before the last `q` (the suffix's decimal places; zeros in front where fewer), the fraction's trailing
    zeros dropped (it has a digit that is not 0)."""
    most = max(CANONICAL.values())
    digits = f"{text}.substring(0, {text}.size() - {_by_suffix(text, {s: len(s) for s in CANONICAL})})"
    padded = f"d.size() > q ? d : {lit('0' * most)}.substring(0, q + 1 - d.size()) + d"
    last = ", ".join(f"f.lastIndexOf({lit(str(digit))})" for digit in range(1, 10))  # of a digit not 0
    split = bind("p.substring(p.size() - q, p.size())", "f", f"f.substring(0, [{last}].max() + 1)")
    whole = bind("p.substring(0, p.size() - q)", "w", f"w + '.' + {split}")
    return bind(_by_suffix(text, CANONICAL), "q", bind(bind(digits, "d", padded), "p", whole))


def _shown(text: str, unit: str) -> str:
    """CEL: quantity_shown of the canonical `text` (a CEL string), its unit `unit` (a CEL string): the engine's
    own form, read at a probe."""
    written = quantity_shown(_PROBE_TEXT, _PROBE, slot("unit"))
    template = written.replace(_PROBE_TEXT, slot("text"), 1).replace(format_fraction(_PROBE, 9), slot("value"), 1)
    assert slot("text") in template and slot("value") in template, written
    return fill(template, {"text": text, "value": _value(text), "unit": unit})


def gpu_line(policy: Policy) -> str | None:
    """validate.fraction_advice's line for `nvidia.com/gpu` under `policy`, its value shown at the slot `shown` and
    written as format_fraction writes it at the slot `held` (MIG's advice on a known model says how much of the
    GPU no slice holds), where it is the same at every probe otherwise; under a backend that spreads a pod's
    memory over GPUs, its advice in its own form (`_spread_line`). None: it depends on the value otherwise, as a
    memory backend's does below one GPU."""
    if shape(policy) is None:
        return None
    spread = _spread_line(policy)
    if spread is not None:
        return spread
    rules = validate.Rules.of(policy)
    lines = {
        validate.fraction_advice(slot("shown"), value, rules, "", False)[0].replace(
            format_fraction(value), slot("held")
        )
        for value in _probes(policy)
    }
    line = lines.pop()
    return line if not lines and slot("shown") in line else None


def _spread_line(policy: Policy) -> str | None:
    """ACK's advice past one GPU (memshare.ack_past_one_line): the same memory as `aliyun.com/gpu-mem` over the
    value's GPUs rounded up, its numbers at the slots `gpus`, `each` and `total` (`_spread_numbers`); None for
    another backend, or where the GPU's memory is unknown (the advice is another then)."""
    spec = compiled_spec(policy)
    if spec is None or not spec.spreads_pods or units_of(spec, policy)[0] is None:
        return None
    return ack_past_one_line(slot("shown"), slot("held"), slot("gpus"), slot("each"), slot("total"), policy)


def _spread_numbers(text: str, policy: Policy) -> dict[str, str]:
    """CEL: the slots of `_spread_line` for the canonical `text` past one GPU (`fractional_text`, `above_one`):
    `W` GPUs and a deficit of `D` units of 10^-p below `g = W + 1`, each GPU's share of its memory `q` MiB,
    floor(value * q / g), is `q - ceil(q * D / (g * 10^p))`, then in whole units (GiB), as memshare.fraction_advice
    writes it. The integers stay within int64: `g` is below memshares.most_count (scope.py), far below
    INT64_MAX / 10^9 (a test holds it)."""
    spec = compiled_spec(policy)
    assert spec is not None
    gpu_mib, unit_mib = units_of(spec, policy)
    assert gpu_mib is not None
    gpus, each = "0", "0"
    for suffix, places in CANONICAL.items():
        scale = 10**places
        digits = f"{text}.substring(0, {text}.size() - {len(suffix)})"
        whole = f"int(d.substring(0, d.size() - {places})) + 1"
        deficit = f"{scale} - int(d.substring(d.size() - {places}, d.size()))"
        share = f"({gpu_mib} - ({gpu_mib} * ({deficit}) + g * {scale} - 1) / (g * {scale})) / {unit_mib}"
        chosen = f"{text}.endsWith({lit(suffix)})"
        gpus = f"{chosen} ? ({bind(digits, 'd', whole)}) : ({gpus})"
        each = f"{chosen} ? ({bind(digits, 'd', bind(whole, 'g', share))}) : ({each})"
    return {
        "gpus": f"string({gpus})",
        "each": f"string({each})",
        "total": bind(gpus, "g", bind(each, "e", "string(g * e)")),
    }


def _probes(policy: Policy) -> tuple[Fraction, ...]:
    """The probes of the values whose line the compiled rule says: under mode memory those past one GPU (`above_one`:
    mutation converts a fraction below 1 to the backend's share, or the webhook advises on the container's own
    resources, which scope.py leaves out)."""
    return tuple(value for value in PROBES if value > 1) if shape(policy) == "memory" else PROBES


def above_one(text: str) -> str:
    """CEL: the canonical `text` (`fractional_text`) is past one GPU: a digit before its last places."""
    return any_of(
        f"{text}.endsWith({lit(suffix)}) && {text}.size() > {places + len(suffix)}"
        for suffix, places in CANONICAL.items()
    )


def _held(text: str) -> str:
    """CEL: format_fraction(value) (4 places, rounded down) of the canonical `text` (`fractional_text`, within a
    thousandth below a whole number: its first 3 places are 9s, so only the 4th can be a trailing zero)."""
    four = f"(size(h[1]) > {PLACES} ? h[1].substring(0, {PLACES}) : h[1])"
    places = bind(four, "f", f"f.endsWith('0') ? f.substring(0, {PLACES - 1}) : f")
    return bind(f"({_value(text)}).split('.')", "h", f"h[0] + '.' + {places}")


def fractional_named(policy: Policy, name: str) -> ContainerRule | None:
    """The line of the resource `name` at a value the API server takes as whole (`fractional_text`), said at the
    name's place among the maxima, as validate._resource says it before any other of the name's lines; None where
    the compiled set says none (`nvidia.com/gpu` where its advice turns on the value: `gpu_line`)."""
    limit, text = f"c.resources.limits[{lit(name)}]", "t"  # the limit's text, bound once in the line
    kept = [has_map("limits"), f"{lit(name)} in c.resources.limits", _fractional(limit)]
    shown = _shown(text, lit(validate.amount_unit(name)))
    if name != NVIDIA_GPU:
        return ContainerRule(all_of(kept), bind(limit, text, _whole_number_line(name, {"shown": shown})))
    gpu = gpu_line(policy)
    if gpu is None:
        return None
    if shape(policy) == "memory":
        kept.append(above_one(limit))
    numbers = _spread_numbers(text, policy) if slot("gpus") in gpu else {}
    said = fill(gpu, {"shown": shown, "held": _held(text), **numbers})
    return ContainerRule(all_of(kept), bind(limit, text, said))


def fractional_keyed(prefix: str, by_name: Collection[str], key: str) -> tuple[str, str]:
    """(whether the limit of the key `key`, a name of `prefix` but none of `by_name`, is at a value the API server
    takes as whole, its line): said at the prefix's place among the maxima, in the order of the names where the
    prefix's rule puts them in order (maxima.py)."""
    text = f"c.resources.limits[{key}]"
    kept = [f"{key}.startsWith({lit(prefix)})", _fractional(text)]
    own = sorted(name for name in by_name if name.startswith(prefix))
    if own:
        kept.insert(1, f"!({key} in {strings(own)})")
    line = _whole_number_line(slot("name"), {"name": key, "shown": _shown("t", "''")})
    return all_of(kept), bind(text, "t", line)


def _whole_number_line(name: str, exprs: dict[str, str]) -> str:
    """CEL: validate.fractional_line for a resource but `nvidia.com/gpu` (`name`: the name, or a slot in `exprs`),
    its value at the slot `shown`, with the advice to request a whole number."""
    return fill(validate.fractional_line(name, slot("shown"), False, validate.WHOLE_NUMBER), exprs)
