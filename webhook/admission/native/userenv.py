"""A container's own memory variables, as mutation's env step treats them (mutate._env, _merge_hints): a name the
container sets is never written again and its value is kept; JAX's pair is skipped whole where the container sets
either of JAX's fraction variables; PyTorch's hint is merged into the container's own allocator config where that
has no fraction key of its own (`merges`: exact for a plain config, `key:value` items of letters, digits, `_`, `.`,
`+` and `-`, spaces around them, a comma at the end; the last entry where the container sets the name twice; scope.py
leaves any other to the webhook, as it does a recorded fraction the container sets itself).

Validation parses a memory variable's value as free-form text (as Python's Fraction reads a decimal) and judges it
against the container's share (validate._memory_variables). The native set reads the common cases, a plain decimal
(`0.9`, `.5`, `1.`, `007.50`: ASCII digits and at most one point, ASCII spaces around it and a `+` before it) and
one with an exponent (`9e-1`, `5E+1`, `.5e01`: `e` or `E`, a sign, one or two digits; within the digit budget,
`scaled`); CuPy's a percent of one, `90%`, or a whole byte count (`8e9`) where the GPU's memory is known; in a
PyTorch allocator config the fraction key's first value, exactly in CEL integers (memvars.py); `readings` says
which form each variable takes.
`outside` says where the native set stops: a value the engine reads that is in no such form, an allocator config
that is not plain, or a recorded fraction. A value the engine reads as nothing (not a number), a variable the mode
does not judge, one of the policy's own values and one from a ConfigMap or Secret (`valueFrom`) are covered: the
engine says no line of them, or one the compiled set says too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from webhook.admission.base.envnames import (
    CUPY_LIMIT,
    JAX_FRACTION_VARS,
    JAX_PREALLOCATE,
    PYTORCH_ALLOC_CONF,
    PYTORCH_CUDA_ALLOC_CONF,
    PYTORCH_FRACTION_KEY,
)
from webhook.admission.base.quantity import PLACES
from webhook.admission.native.cel import bind, jsonpatch, lit, strings
from webhook.admission.native.containers import each_of, found_once, path
from webhook.admission.native.family import Gap
from webhook.admission.native.gaps import USER_CONFIG, USER_VALUES
from webhook.admission.phases.envhints import MEBIBYTE, MEMORY_VARIABLES, memory_claim
from webhook.admission.phases.mutate import RECORDED_FRACTION
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

PYTORCH_CONFS = (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF)

# A plain decimal: ASCII digits with at most one point, a digit on either side of it (what Python's Fraction reads
# of such text is its digits over a power of ten). RE2 (CEL's `matches`) and Python read these patterns alike.
PLAIN = r"[0-9]+[.]?[0-9]*|[.][0-9]+"
# A memory variable's number may have an exponent after it (Fraction reads `9e-1` as 9/10): `e` or `E`, a sign and
# one or two digits; a whole one (CuPy's byte count) only a `+`, its value stays whole. RE2 and Python alike.
EXPONENT = r"[eE][+-]?[0-9]{1,2}"
NUMBER = rf"({PLAIN})({EXPONENT})?"
WHOLE = r"[0-9]+([eE][+]?[0-9]{1,2})?"
LONGEST = 12  # the most digits and points of a compiled number: its integers, times a share's, stay within int64
# The blanks a value may have around its number (a YAML block scalar's line break, a tab), which the webhook strips
# as whitespace and the CEL drops (memvars.parts): ASCII space, tab, line feed, form feed, carriage return. RE2's
# class and Python's alike (not `\s`, which is wider in Python); the CEL escapes of each, for `replace`.
BLANK = r"[ \t\n\f\r]"
BLANK_ESCAPES = (" ", "\\t", "\\n", "\\f", "\\r")
# A number's length: at most LONGEST characters, its exponent among them, after a `+` (a plain decimal's digits
# and points; the number of a plain allocator config, with its spaces, stays within the webhook's 32 characters)
SHORT = rf"^{BLANK}*[+]?[0-9.eE+-]{{1,{LONGEST}}}%?{BLANK}*$"
INT64 = 2**63


def written(pattern: str) -> str:
    """`pattern` (a number's) as a value may write it: blanks around it and a `+` before it, which the webhook
    strips and Fraction reads as nothing (the CEL drops them: memvars.parts)."""
    return rf"^{BLANK}*[+]?({pattern}){BLANK}*$"


# A plain PyTorch allocator config: `key:value` items joined by commas, keys of letters, digits and `_`, values of
# those, `.`, `+` and `-` (`expandable_segments:True, max_split_size_mb:128`) or a bracketed list of sizes, or `>`,
# each with its count (`roundup_power2_divisions:[256:1,512:2,>:8]`, as PyTorch reads it), ASCII spaces around a
# key, a value, an item or a list's part (at most SPACES on a side: a value the CEL reads, with its spaces, stays
# within the 32 characters the webhook reads), a comma at the end; or spaces alone. Such a config without its
# spaces is its items as the webhook reads them (each key stripped; a list's parts, split at its commas, are items
# whose keys are sizes or `>`, never the fraction key): there the fraction key's first item is found by splitting,
# and mutation's merge is the config less its last comma, a comma and its item appended.
SPACES = " {0,9}"
LIST_PART = rf"{SPACES}([0-9]+|>){SPACES}:{SPACES}[0-9]+{SPACES}"
CONF_VALUE = rf"([A-Za-z0-9_.+-]*|\[{LIST_PART}(,{LIST_PART})*\])"
CONF_ITEM = rf"{SPACES}[A-Za-z0-9_]+{SPACES}:{SPACES}{CONF_VALUE}{SPACES}"
PLAIN_CONF = rf"^({CONF_ITEM}(,{CONF_ITEM})*(,{SPACES})?|{SPACES})$"
FRACTION_ITEM = f",{PYTORCH_FRACTION_KEY}:"  # the fraction key's item, after the comma before it
# The names a mutation that writes memory variables binds a section's containers to (containers.found_once):
# those that get the variables, those of them with an env, and of those the ones that run no inference engine.
HOLDERS, HELD, IDLE = "holders", "held", "idle"


@dataclass(frozen=True, slots=True)
class Reading:
    """How a variable's compiled value is read: `pattern` (anchored) says which values; the claim is the number's
    digits over 10^(digits after the point), scaled by 10^(its exponent), over 100 where it ends with `%`, else
    over `scale`. In a PyTorch
    allocator config (`conf`) the number is its fraction key's first value."""

    pattern: str
    scale: int
    conf: bool = False

    def reads(self, value: str) -> bool:
        text = conf_number(value) if self.conf else value
        return re.fullmatch(SHORT, text) is not None and re.fullmatch(self.pattern, text) is not None and scaled(text)


def scaled(text: str) -> bool:
    """The number `text` (SHORT, in a Reading's form) stays within the digit budget with its exponent: its
    mantissa's characters and the exponent's size at most LONGEST together, so its digits times the power of ten
    stay below 10^LONGEST and the power of ten it is over at most 10^(LONGEST - 1) (userenv.fits). As
    memvars.scaled_cel reads it."""
    mantissa, *exponent = re.sub(BLANK, "", text).replace("+", "").split("%")[0].replace("E", "e").split("e")
    return not exponent or len(mantissa) + abs(int(exponent[0])) <= LONGEST


def conf_number(value: str) -> str:
    """The fraction key's first value in a plain allocator config without its spaces (envhints._alloc_conf_fraction
    reads the same there, stripped), '' where it has none: as `conf_number_cel` finds it."""
    found = f",{value.replace(' ', '')}".split(FRACTION_ITEM)
    return found[1].split(",")[0] if len(found) > 1 else ""


def conf_number_cel(value: str) -> str:
    """CEL of `conf_number` of the CEL string `value`."""
    spaceless = f"(',' + {value}.replace(' ', ''))"
    return bind(f"{spaceless}.split({lit(FRACTION_ITEM)})", "q", "size(q) > 1 ? q[1].split(',')[0] : ''")


def plain_conf(entry: dict[str, Any]) -> bool:
    """An allocator config's env entry that the native set merges into and judges as the webhook does: a plain
    config, or none to read (from a ConfigMap or Secret: neither merges into it nor judges it)."""
    if "value" not in entry:
        return True
    value = entry["value"]
    return "valueFrom" not in entry and type(value) is str and re.fullmatch(PLAIN_CONF, value) is not None


VALUE = Reading(written(NUMBER), 1)  # a memory variable's or an engine's flag's: a plain decimal, an exponent allowed


def readings(policy: Policy) -> dict[str, Reading]:
    """The memory variables whose plain values the native set judges as validation does, in MEMORY_VARIABLES'
    order: those the mode judges (the backend's `judges_variable`), where there is a share, but PyTorch's
    allocator configs; none where the integers could overflow (a share or a GPU's memory past any real one)."""
    return policy.derived("native-readings", _readings)


def fits(policy: Policy) -> bool:
    """A compiled number's integers, times the share's (or a recorded fraction's), stay within CEL's int64: there
    is a share, and neither it nor the GPU's memory is past any real one."""
    share, memory = Rules.of(policy).share, policy.gpu_memory_mib
    if share is None:
        return False
    bytes_scale = memory * MEBIBYTE if memory else 0
    largest_number, largest_scale = 10**LONGEST, max(100 * 10 ** (LONGEST - 1), bytes_scale)
    unit = 10**PLACES
    numbers = largest_number * max(share.denominator, unit)
    return bool(numbers < INT64 and max(share.numerator, unit) * largest_scale < INT64)


def plain(value: str) -> bool:
    """`value` is a plain decimal, with an exponent or none, within the digit budget (spaces around it, a `+`
    before it), which the native set reads exactly."""
    return VALUE.reads(value)


def _readings(policy: Policy) -> dict[str, Reading]:
    if not fits(policy):
        return {}
    memory = policy.gpu_memory_mib
    bytes_scale = memory * MEBIBYTE if memory else 0
    backend = backend_of(policy)
    found: dict[str, Reading] = {}
    for name in MEMORY_VARIABLES:
        if not backend.judges_variable(name):
            continue
        if name in PYTORCH_CONFS:  # the fraction key's value, a number
            found[name] = Reading(VALUE.pattern, 1, conf=True)
        elif name == CUPY_LIMIT:  # a percent; a whole byte count over the GPU's memory, where it is known
            counts = f"|{written(WHOLE)}" if memory else ""
            found[name] = Reading(written(f"({NUMBER})%") + counts, bytes_scale or 1)
        else:
            found[name] = VALUE
    return found


def sets(names: Iterable[str]) -> str:
    """`c` has an env entry named one of `names`."""
    listed = sorted(names)
    named = f"e.name == {lit(listed[0])}" if len(listed) == 1 else f"e.name in {strings(listed)}"
    return f"has(c.env) && c.env.exists(e, has(e.name) && {named})"


def appends(name: str, *also: str) -> str:
    """Mutation appends the policy's variable `name` to `c` (whose env is there): the container sets none of the
    names that keep it out (_merge_hints), nor any of `also`."""
    names = {name, *also}
    if name in (*JAX_FRACTION_VARS, JAX_PREALLOCATE):
        names |= set(JAX_FRACTION_VARS)  # JAX refuses both fraction variables: its hints are skipped whole
    if name in PYTORCH_CONFS:
        names |= set(PYTORCH_CONFS)  # merged into the container's own (`merges`)
    return f"!({sets(names)})"


def over_holders(section: str, keep: str, ops: list[str], engine: str | None) -> str:
    """CEL: a section's memory-variable operations `ops` (each over HOLDERS, HELD or IDLE), with the section's
    containers that keep `keep` found once as HOLDERS, those of them with an env as HELD, and, where `engine` is
    given (a variable that a container running an inference engine does not get), those of HELD that run none as
    IDLE: the same operations, in the same order, as each filtering the section itself."""
    made = " + ".join(ops)
    if engine is not None:
        made = bind(f"{HELD}.filter(c, !({engine}))", IDLE, made)
    return found_once(section, keep, HOLDERS, bind(f"{HOLDERS}.filter(c, has(c.env))", HELD, made))


def merges(section: str, found: str, keep: str, hint: str) -> str:
    """The JSON Patch operations of `section` that merge PyTorch's hint (`hint`, the CEL of its value) into the
    container's own allocator config, as _merge_hints does, in each container `c` of `found` (its containers, as
    containers.found_once finds them) where `keep` holds (it gets the hint, and its env is there): the last entry
    of PYTORCH_CUDA_ALLOC_CONF it sets, else of PYTORCH_ALLOC_CONF, where that has a value and no fraction key
    (merge_alloc_conf), its value then the config less a comma at its end, a comma and the hint (the hint alone
    where it is spaces or nothing). Exact for a plain config (`outside`)."""
    cuda, alloc = PYTORCH_CONFS
    place = f"c.env.map(e, has(e.name) ? e.name : '').lastIndexOf({sets([cuda])} ? {lit(cuda)} : {lit(alloc)})"
    mergeable = f"has(x.value) && !has(x.valueFrom) && {without_key('x.value')}"
    when = f"({keep}) && {sets(PYTORCH_CONFS)} && {bind(f'c.env[{place}]', 'x', mergeable)}"
    value = bind(f"c.env[{place}].value", "x", merged("x", hint))
    at = f"{path(section, '/env/')} + string({place}) + '/value'"
    return each_of(found, when, jsonpatch("replace", at, value))


def without_key(config: str) -> str:
    """CEL: the plain allocator config `config` (a CEL string) has no fraction key (merge_alloc_conf merges)."""
    return f"!((',' + {config}.replace(' ', '')).contains({lit(FRACTION_ITEM)}))"


def merged(config: str, hint: str) -> str:
    """CEL of merge_alloc_conf's value for the plain allocator config `config` (a CEL string, or variable) that
    has no fraction key, and the hint `hint` (CEL): the config less a comma at its end, a comma and the hint; the
    hint alone where the config is spaces or nothing."""
    kept = f"({config}.endsWith(',') ? {config}.substring(0, size({config}) - 1) : {config})"
    return f"{config}.replace(' ', '') == '' ? ({hint}) : {kept} + ',' + ({hint})"


def outside(env: list[Any], policy: Policy) -> Gap | None:
    """The gap where the container's own variables are more than the native set judges as the webhook does: a
    recorded fraction of its own, a PyTorch allocator config that is not plain (USER_CONFIG), a memory
    variable's value that the engine reads in a form `readings` does not (USER_VALUES)."""
    for entry in env:
        if type(entry) is not dict:
            continue
        name = entry.get("name")
        if name == RECORDED_FRACTION or (name in PYTORCH_CONFS and not plain_conf(entry)):
            return USER_CONFIG
        if name in MEMORY_VARIABLES and "value" in entry and not _compiled(name, entry["value"], policy):
            return USER_VALUES
    return None


def _compiled(name: str, value: Any, policy: Policy) -> bool:
    """The native set says of `name=value` what validation says: nothing where the mode does not judge the
    variable, where it is the policy's own value (judged as a constant, memvars.py) or where the engine reads no
    claim from it; else the line, where `readings` reads the value."""
    if type(value) is not str:
        return False
    rules = Rules.of(policy)
    if rules.share is None or not backend_of(policy).judges_variable(name) or (name, value) in rules.own_memory_values:
        return True
    if memory_claim(name, value, policy.gpu_memory_mib) is None:
        return True
    reading = readings(policy).get(name)
    return reading is not None and reading.reads(value)
