"""Inference engines' memory flags (phases/engines.py) under time-slicing and MPS: mutation's `_engine_args`.

A container that holds a shared replica (after the mapping), or a fraction that becomes one, and runs an engine
whose flag its sharing mode applies (the backend's engine_flags), gets the engine's argument appended to `args`
(a new `args` list where it has none), as mutation appends it, where its command line has the flag in no
spelling and form: reinvoked, the policy finds it and adds nothing. The argument is the engine's own text
(engines.argument): for one replica's share (or `memoryFraction`) a constant; for a converted fraction the
engine's text around its number, which is JAX's headroom value of the fraction (fractions.headroom), capped at
one replica's share as mutate._env caps it.

A flag the container writes itself is judged as validation judges it (validate._engine_flag, `UserFlags`): its last
occurrence in any spelling, `--flag=v` or `--flag v`, whose value is a plain decimal of at most 12 digits and
points, spaces around it and a `+` before it allowed (userenv.plain: read in CEL integers as memvars.py reads a
variable's), against the container's share (one replica's, or a converted fraction's below it, read back from the
recorded fraction), in the engine's line (validate.engine_flag_line) with the argument to write instead
(engines.argument, in integer CEL at a recorded fraction). Under memoryFraction a converted fraction gets
memoryFraction's argument, as a replica does, and validation judges it against the recorded fraction as it judges a
flag of the container's own: `UserFlags` judges it so on the object as the mutating policy leaves it.

What stays the webhook's (scope.py, `outside`): a flag of the container's own whose value the engine reads as a
number in another form (an exponent, a tab, more digits), and a command line that is not a list of strings (read
as no engine). A command run through a shell is no engine for the webhook either (engines.py), so both give it
the frameworks' variables.
"""

from __future__ import annotations

from typing import Any

from webhook.admission.base.quantity import NANO, PLACES
from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.native import fractions
from webhook.admission.native.cel import bind, fill, jsonpatch, lit, nanos, slot, strings
from webhook.admission.native.commandline import ARGV, engine_of, well_formed
from webhook.admission.native.containers import counts_replica, each, path, value
from webhook.admission.native.family import SECTIONS, ContainerRule, Family, Gap, Mutation
from webhook.admission.native.fractions import PROBES, compiled, converts, headroom
from webhook.admission.native.gaps import COMMAND_LINES, ENGINE_FLAGS, ENGINES, shape
from webhook.admission.native.memvars import parts, scaled_cel
from webhook.admission.native.replicas import holds_replica
from webhook.admission.native.userenv import SHORT, VALUE, fits, plain
from webhook.admission.phases import engines, validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of


def _applying(policy: Policy) -> list[engines.Engine]:
    return [engine for engine in engines.ENGINES if engines.applies(engine, policy)]


def _around(policy: Policy) -> dict[str, tuple[str, str]] | None:
    """Each applying engine's argument for a converted fraction as the text before and after its number (the
    headroom value), read at the fractions' probes and checked at each; None where one is not so written."""
    number, memory = headroom(policy), policy.gpu_memory_mib
    found = {}
    for engine in _applying(policy):
        written = number.engine(PROBES[0])
        text = engines.argument(engine, PROBES[0], memory)
        if text.count(written) != 1:
            return None
        before, after = text.split(written)
        if any(engines.argument(engine, f, memory) != before + number.engine(f) + after for f in PROBES):
            return None
        found[engine.name] = (before, after)
    return found


def _fractions(policy: Policy) -> bool:
    """A converted fraction's container gets the flag here (its variables are compiled: fractions.py)."""
    return compiled(policy) and _applying(policy) != []


def unsupported(policy: Policy) -> Gap | None:
    """Why an engine's flag is not compiled for this policy, or None: a converted fraction's flag that is not the
    headroom value of the fraction; under memoryFraction, one whose value (memoryFraction's, which validation
    judges against the recorded fraction) `UserFlags` does not read; or a replica's flag (memoryFraction's) that
    validation would judge over the share (a policy the loader refuses)."""
    if _fractions(policy) and policy.memory_fraction is None and _around(policy) is None:
        return ENGINES
    if _fractions(policy) and policy.memory_fraction is not None and not _capped_judged(policy):
        return ENGINES
    fraction, share = backend_of(policy).shared_fraction(policy), Rules.of(policy).share
    memory = policy.gpu_memory_mib
    if fraction is None or share is None:
        return None
    return ENGINES if any(engines.value_for(e, fraction, memory) > share for e in _applying(policy)) else None


def _capped_judged(policy: Policy) -> bool:
    """Under memoryFraction a converted fraction gets memoryFraction's flag (mutate._engine_args), which
    validation judges against the recorded fraction (`_engine_flag`) as a flag of the container's own: the
    compiled policies judge it so where `UserFlags` is compiled and reads its value (a plain decimal)."""
    assert policy.memory_fraction is not None
    if not judged(policy):
        return False
    memory = policy.gpu_memory_mib
    for engine in _applying(policy):  # the argument as validation reads it back from the command line
        found = engines.find({"args": [engines.argument(engine, policy.memory_fraction, memory)]}, engine)
        if found is None or not plain(found.text or ""):
            return False
    return True


def outside(body: dict[str, Any], policy: Policy) -> Gap | None:
    """The gap that keeps a container holding a GPU under a `shared` policy out of the native set, for its
    command line (scope.py)."""
    if not well_formed(body):
        return COMMAND_LINES
    engine = engines.detect(body)
    if engine is None or not engines.applies(engine, policy):
        return None
    found = engines.find(body, engine)
    if found is not None:  # mutation adds no flag: validation judges this one
        return None if found.value is None or (judged(policy) and plain(found.text or "")) else ENGINE_FLAGS
    return unsupported(policy)


def _table(items: dict[str, str]) -> str:
    """A CEL map of string literals."""
    return "{" + ", ".join(f"{lit(key)}: {lit(text)}" for key, text in items.items()) + "}"


class EngineFlags(Family):
    name = "inference engines' memory flags"

    def gaps(self, policy: Policy) -> list[Gap]:
        if shape(policy) != "shared" or not _applying(policy):
            return []
        return [ENGINES] if unsupported(policy) is not None else []

    def mutations(self, policy: Policy) -> list[Mutation]:
        applying = _applying(policy)
        if shape(policy) != "shared" or not applying:
            return []
        memory = policy.gpu_memory_mib
        # One replica's share, or memoryFraction (mutate._env's default fraction): for a replica, and for a converted
        # fraction under memoryFraction; none where the policy sets no replicas (then a replica gets no flag).
        fraction = backend_of(policy).shared_fraction(policy)
        holders, argument = [], "''"
        if fraction is not None:
            holders.append(holds_replica(policy))
            argument = f"{_table({e.name: engines.argument(e, fraction, memory) for e in applying})}[g]"
        if _fractions(policy) and unsupported(policy) is None:
            converted = converts(policy)
            share = Rules.of(policy).share
            around = _around(policy)
            if policy.memory_fraction is None and around is not None:
                # the fraction's value, capped at one replica's share where it is more (mutate._env caps it)
                before = _table({name: text for name, (text, _) in around.items()})
                after = _table({name: text for name, (_, text) in around.items()})
                of_k = f"{before}[g] + ({headroom(policy).cel('k')}) + {after}[g]"
                if share is not None:
                    capped = _table({e.name: engines.argument(e, share, memory) for e in applying})
                    of_k = f"k * {share.denominator} <= {share.numerator * NANO} ? {of_k} : {capped}[g]"
                argument = f"({converted}) ? {bind(nanos(value('limits', NVIDIA_GPU)), 'k', of_k)} : {argument}"
                holders.append(converted)
            elif fraction is not None:  # memoryFraction's, as for a replica
                holders.append(converted)
        if not holders:
            return []
        holder = " || ".join(f"({term})" for term in holders)
        spellings = "{" + ", ".join(f"{lit(e.name)}: {strings(e.spellings)}" for e in applying) + "}"
        absent = f"!({ARGV}).exists(t, {spellings}[g].exists(s, t == s || t.startsWith(s + '=')))"
        runs = f"g in {strings([e.name for e in applying])} && {absent}"
        keep = f"({holder}) && {bind(engine_of(), 'g', runs)}"
        parts = []
        for section in SECTIONS:  # appended to args, or args made, as mutate._engine_args does
            at = f"{path(section, '/args')} + (has(c.args) ? '/-' : '')"
            added = jsonpatch("add", at, "has(c.args) ? dyn(a) : dyn([a])")
            parts.append(each(section, keep, bind(engine_of(), "g", bind(argument, "a", added))))
        return [Mutation("inference engines' memory flags", " + ".join(parts))]


def judged(policy: Policy) -> bool:
    """The container's own flags are judged in CEL under this policy (`UserFlags`): an engine's flag applies, the
    integers fit (userenv.fits) and, where fractions are converted, the argument at a fraction is written."""
    if shape(policy) != "shared" or not _applying(policy) or not fits(policy):
        return False
    return not compiled(policy) or _around(policy) is not None


def _spelled(spellings: str) -> str:
    """CEL of the flag's last token `o` in the command line `v` (one of `spellings`, or one with `=`): [its
    spelling, its value as written], or [] where it has no value (the line's last token) or a value with `=`
    (no number)."""
    alone = bind("v.lastIndexOf(o)", "i", "i + 1 < size(v) ? [o, v[i + 1]] : []")
    joined = bind("o.split('=')", "p", "size(p) == 2 ? p : []")
    return f"{spellings}.exists(s, o == s) ? ({alone}) : ({joined})"


class UserFlags(Family):
    """validate._engine_flag: the container's own flag over its share, after the memory variables' lines
    (registry.py), as validation says them."""

    name = "inference engines' own memory flags"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        if not judged(policy):
            return []
        rules, applying, memory = Rules.of(policy), _applying(policy), policy.gpu_memory_mib
        share, replica, replicas = rules.share, rules.shared_resource, policy.sharing.replicas
        assert share is not None and replica is not None  # fits: a share
        unit, q, p = 10**PLACES, share.denominator, share.numerator
        spellings = "{" + ", ".join(f"{lit(e.name)}: {strings(e.spellings)}" for e in applying) + "}"
        constant = f"{_table({e.name: engines.argument(e, share, memory) for e in applying})}[g]"
        line = validate.engine_flag_line(
            slot("spelling"), slot("claim"), slot("title"), slot("reads"), slot("portion"), policy.sharing.mode,
            policy.name, slot("instead"),
        )  # fmt: skip
        # g: the engine, w: [the spelling, the value as written], x: [n, d] of the value (memvars.parts), l: the
        # claim as format_fraction writes it
        filled = {
            "spelling": "w[0]",
            "claim": "l",
            "title": f"{_table({e.name: e.title for e in applying})}[g]",
            "reads": f"{_table({e.name: e.reads for e in applying})}[g]",
        }
        if not compiled(policy):  # one replica's share: no recorded fraction to read
            said = fill(line, {**filled, "portion": lit(f"1/{replicas}"), "instead": constant})
            judge = f"x[0] * {q} > {p} * x[1] ? [{_claimed(said)}] : []"
        else:  # a: the recorded fraction in units of 10^-PLACES (-1: none), t: as written, m: below the share
            around = _around(policy)
            assert around is not None  # judged
            before = _table({name: text for name, (text, _) in around.items()})
            after = _table({name: text for name, (_, text) in around.items()})
            at_fraction = bind(f"a * {NANO // unit}", "k", f"{before}[g] + ({headroom(policy).cel('k')}) + {after}[g]")
            portion = f"m ? t : {lit(f'1/{replicas}')}"
            said = fill(line, {**filled, "portion": portion, "instead": f"m ? ({at_fraction}) : {constant}"})
            over = f"m ? x[0] * {unit} > a * x[1] : x[0] * {q} > {p} * x[1]"
            below = bind(f"a >= 0 && a * {q} < {p * unit}", "m", f"({over}) ? [{_claimed(said)}] : []")
            written = f"size(r) > 0 && has(r[0].value) && r[0].value.matches({fractions.WRITTEN})"
            units = bind(f"({written}) ? {fractions.recorded_units('r[0]')} : -1", "a", below)
            text = bind(f"({written}) ? r[0].value : ''", "t", units)
            judge = bind(f"has(c.env) ? c.env.filter(e, {fractions.RECORDED}) : []", "r", text)
        number = f"w[1].matches({lit(SHORT)}) && w[1].matches({lit(VALUE.pattern)}) && {scaled_cel('w[1]')}"
        valued = f"size(w) == 2 && {number} ? {bind(parts('w[1]'), 'x', judge)} : []"
        last = f"size(f) == 0 ? [] : {bind('f[size(f) - 1]', 'o', _spelled(f'{spellings}[g]'))}"
        matching = f"v.filter(o, {spellings}[g].exists(s, o == s || o.startsWith(s + '=')))"
        found = bind(ARGV, "v", bind(matching, "f", bind(last, "w", valued)))
        sentence = bind(engine_of(), "g", f"g in {strings([e.name for e in applying])} ? ({found}) : []")
        every = strings(sorted({s for e in applying for s in e.spellings}))
        written_flag = f"({ARGV}).exists(o, {every}.exists(s, o == s || o.startsWith(s + '=')))"
        return [ContainerRule(f"{counts_replica(replica, rules.class_names)} && {written_flag}", sentence, many=True)]


def _claimed(said: str) -> str:
    """`said` with `l` bound to the claim n/d of `x`, as format_fraction writes it (rounded down to PLACES)."""
    return bind(fractions.formatted(f"x[0] * {10**PLACES} / x[1]"), "l", said)
