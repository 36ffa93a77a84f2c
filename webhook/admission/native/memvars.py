"""validate._memory_variables: a memory variable in a container that holds a shared replica may not let its
framework take more than the container's share (one replica's, or a converted fraction's below it, read back
from the recorded fraction as fractions.py writes it), said in the engine's line (validate.memory_line).

Validation judges the container's variables in env order, those not the policy's own values first (the
container's, and those mutation appended or merged into: every one the native set judges is a plain decimal,
an exponent after it allowed, CuPy's percent or a plain allocator config's fraction key, userenv.readings), then,
below one replica's share, the policy's own values (a constant claim each). A value is parsed in integers,
exactly: its digits `n` and the power of ten after its point (times 100 for a percent, the GPU's bytes for a CuPy
byte count) `d`, its exponent's power of ten multiplying the one or dividing out of the other; the claim n/d
is over a share p/q where n*q > p*d, and over a recorded fraction of `a` units of 10^-PLACES where
n*10^PLACES > a*d. The claim is written as format_fraction writes it (rounded down to PLACES places), the value
to write instead is the engine's (envhints.memory_value) for one replica's share, or at the recorded fraction
(fractions.suggestions). What the native set does not read is left to the webhook (userenv.outside).
"""

from __future__ import annotations

from webhook.admission.base.envnames import CUPY_LIMIT
from webhook.admission.base.quantity import NANO, PLACES
from webhook.admission.native import fractions
from webhook.admission.native.cel import bind, fill, lit, slot, strings
from webhook.admission.native.containers import counts_replica
from webhook.admission.native.family import ContainerRule, Family
from webhook.admission.native.gaps import shape
from webhook.admission.native.userenv import BLANK_ESCAPES, LONGEST, SHORT, Reading, conf_number_cel, readings
from webhook.admission.phases import validate
from webhook.admission.phases.envhints import MEMORY_VARIABLES, memory_claim, memory_value
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

KEY = "e.name + '=' + e.value"  # an env entry `e` as its (name, value): names hold no `=`


def _map(items: dict[str, str]) -> str:
    """A CEL map literal of string keys and CEL values."""
    return "{" + ", ".join(f"{lit(key)}: {value}" for key, value in items.items()) + "}"


def owned(policy: Policy) -> dict[str, tuple[int, int]]:
    """The policy's own values of the variables the mode judges (Rules.own_memory_values), as KEY, with the
    numerator and denominator of each claim (0 where the engine reads none: never over)."""
    rules, backend, memory = Rules.of(policy), backend_of(policy), policy.gpu_memory_mib
    found: dict[str, tuple[int, int]] = {}
    for name, value in sorted(rules.own_memory_values):
        if name in MEMORY_VARIABLES and backend.judges_variable(name):
            claim = memory_claim(name, value, memory) or 0
            found[f"{name}={value}"] = (claim.numerator, claim.denominator)
    return found


def _mantissa_exponent(text: str) -> str:
    """CEL of the number `text` (a CEL string, in a Reading's form), its blanks and `+` dropped, without CuPy's
    `%`, split at its exponent's `e`: [mantissa] or [mantissa, exponent]."""
    unblanked = "".join(f".replace('{blank}', '')" for blank in BLANK_ESCAPES)
    return f"{text}{unblanked}.replace('+', '').split('%')[0].replace('E', 'e').split('e')"


def scaled_cel(text: str) -> str:
    """CEL of userenv.scaled: the number `text` stays within the digit budget with its exponent."""
    return bind(
        _mantissa_exponent(text), "me", f"size(me) < 2 || size(me[0]) + int(me[1].replace('-', '')) <= {LONGEST}"
    )


def parts(text: str, scale: str = "") -> str:
    """CEL of [n, d] for the CEL string `text`, a number in a Reading's form within the digit budget
    (userenv.scaled; its spaces and `+` dropped, CuPy's percent with its `%`): its digits as an int over the power of
    ten after its point, the exponent's power moved to the one side or the other, times `scale` (CEL text after the
    power over, or none)."""
    powers = [10**i for i in range(LONGEST)]  # each power either side is below 10^LONGEST (userenv.scaled)
    return bind(
        _mantissa_exponent(text),
        "me",
        bind(
            "me[0].split('.')",
            "parts",
            bind(
                "(size(me) > 1 ? int(me[1]) : 0) - (size(parts) > 1 ? size(parts[1]) : 0)",
                "sh",
                f"[int('0' + parts.join('')) * {powers}[sh > 0 ? sh : 0], {powers}[sh < 0 ? -sh : 0]{scale}]",
            ),
        ),
    )


def _plain(read: dict[str, Reading], own: dict[str, tuple[int, int]], index: str) -> str:
    """CEL of the container `c`'s variables that `read` reads, not the policy's own values, in env order: each as
    [its name's place in `index`, n, d] (module doc)."""
    if not read:
        return "[]"
    scales = _map({name: str(reading.scale) for name, reading in read.items()})
    forms = _map({name: lit(reading.pattern) for name, reading in read.items()})
    not_owned = f" && !(({KEY}) in {_owns(own)})" if own else ""
    named = f"has(e.name) && e.name in {strings(read)} && has(e.value){not_owned}"
    confs = [name for name, reading in read.items() if reading.conf]
    if confs:  # each as [its name, the text of its number] first: an allocator config's fraction key's value
        text = f"e.name in {strings(confs)} ? ({conf_number_cel('e.value')}) : e.value"
        scale = f" * (y[1].contains('%') ? 100 : {scales}[y[0]])" if CUPY_LIMIT in read else ""
        number = f"y[1].matches({lit(SHORT)}) && y[1].matches({forms}[y[0]]) && {scaled_cel('y[1]')}"
        found = f"c.env.filter(e, {named}).map(e, [e.name, {text}])"
        return f"{found}.filter(y, {number}).map(y, [{index}[y[0]]] + {parts('y[1]', scale)})"
    scale = f" * (e.value.contains('%') ? 100 : {scales}[e.name])" if CUPY_LIMIT in read else ""
    kept = f"{named} && e.value.matches({lit(SHORT)}) && e.value.matches({forms}[e.name]) && {scaled_cel('e.value')}"
    return f"c.env.filter(e, {kept}).map(e, [{index}[e.name]] + {parts('e.value', scale)})"


def _owns(own: dict[str, tuple[int, int]]) -> str:
    return _map({key: f"[{n}, {d}]" for key, (n, d) in own.items()})


def _policy_values(own: dict[str, tuple[int, int]], index: str) -> str:
    """CEL of `c`'s variables that hold the policy's own values, in env order, as `_plain` gives them."""
    owns = _owns(own)
    names = strings(dict.fromkeys(key.split("=", 1)[0] for key in own))
    kept = f"has(e.name) && e.name in {names} && has(e.value) && ({KEY}) in {owns}"
    return f"c.env.filter(e, {kept}).map(e, [{index}[e.name]] + {owns}[{KEY}])"


class MemoryVariables(Family):
    name = "memory variables"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        """One rule, on a container that holds the replica, whose lines are its variables over its share, in
        validation's order: its values that `readings` reads, then, below one replica's share, the policy's own
        (a container with none over says no line)."""
        rules = Rules.of(policy)
        share, replica = rules.share, rules.shared_resource
        read, own = readings(policy), owned(policy)
        names = list(dict.fromkeys([*read, *(key.split("=", 1)[0] for key in own)]))
        if shape(policy) != "shared" or share is None or replica is None or not names:
            return []
        unit, q, p = 10**PLACES, share.denominator, share.numerator
        index = _map({name: str(at) for at, name in enumerate(names)})
        plain = _plain(read, own, index)
        memory, replicas = policy.gpu_memory_mib, policy.sharing.replicas
        line = validate.memory_line(
            slot("name"),
            slot("reader"),
            slot("claim"),
            slot("portion"),
            policy.sharing.mode,
            policy.name,
            slot("setting"),
        )
        # each x: [the name's place in `names`, n, d]
        settings = strings(
            validate.setting_words(name, MEMORY_VARIABLES[name], memory_value(name, share, memory)) for name in names
        )
        filled = {
            "name": f"{strings(names)}[x[0]]",
            "reader": f"{strings(MEMORY_VARIABLES[name] for name in names)}[x[0]]",
            "claim": fractions.formatted(f"x[1] * {unit} / x[2]"),
        }
        if not fractions.compiled(policy):  # one replica's share: no recorded fraction to read
            said = fill(line, {**filled, "portion": lit(f"1/{replicas}"), "setting": f"{settings}[x[0]]"})
            listed = f"({plain}).filter(x, x[1] * {q} > {p} * x[2]).map(x, {said})"
        else:  # a: the recorded fraction in units of 10^-PLACES (-1: none), t: as written, m: below the share
            suggested = fractions.suggestions(policy)
            assert suggested is not None  # else fractions are not compiled
            chain = ""
            for at, name in reversed(list(enumerate(names))):
                words = validate.setting_words(name, MEMORY_VARIABLES[name], slot("instead"))
                words = fill(words, {"instead": suggested[name]("k")})
                chain = words if not chain else f"x[0] == {at} ? ({words}) : ({chain})"
            setting = f"m ? {bind(f'a * {NANO // unit}', 'k', chain)} : {settings}[x[0]]"
            portion = f"m ? t : {lit(f'1/{replicas}')}"
            said = fill(line, {**filled, "portion": portion, "setting": setting})
            over = f"m ? x[1] * {unit} > a * x[2] : x[1] * {q} > {p} * x[2]"
            values = f"{plain} + (m ? {_policy_values(own, index)} : [])" if own else plain
            # the container's recorded fractions, found once (`c.env` is there: the rule's condition)
            written = f"size(r) > 0 && has(r[0].value) && r[0].value.matches({fractions.WRITTEN})"
            judged = bind(f"a >= 0 && a * {q} < {p * unit}", "m", f"({values}).filter(x, {over}).map(x, {said})")
            units = bind(f"({written}) ? {fractions.recorded_units('r[0]')} : -1", "a", judged)
            text = bind(f"({written}) ? r[0].value : ''", "t", units)
            listed = bind(f"c.env.filter(e, {fractions.RECORDED})", "r", text)
        named = f"has(e.name) && e.name in {strings(names)} && has(e.value)"
        condition = f"{counts_replica(replica, rules.class_names)} && has(c.env) && c.env.exists(e, {named})"
        return [ContainerRule(condition, listed, many=True)]
