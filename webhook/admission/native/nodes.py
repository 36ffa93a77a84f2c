"""The pod's own node constraints (nodeSelector, node affinity), where validation reads them: a pod that holds
the renamed shared replica and pins itself to nodes whose replicas keep the name `nvidia.com/gpu`
(validate.py `_pinned_to_kept_name`, steering.kept_name_pin), said with validation's own sentence.

Where the policy steers, its node affinity and a nodeSelector that contradicts it (`Steering`).
"""

from __future__ import annotations

import re
from typing import Any

from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.cluster.nodes import PRODUCT_LABEL as PRODUCT
from webhook.admission.native import spreads
from webhook.admission.native.cel import all_of, any_of, bind, fill, jsonpatch, lit, slot, strings
from webhook.admission.native.containers import AT, SPEC, count, holds, value, whole_limit
from webhook.admission.native.family import SECTIONS, Family, Lines, Mutation
from webhook.admission.native.gaps import shape
from webhook.admission.phases import steering, validate
from webhook.admission.phases.steering import OBSOLETE, REQUIRED
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.memshare import spec_of
from webhook.admission.sharing.registry import backend_of

SHARED_PRODUCT = "-SHARED"  # GPU feature discovery's suffix on a product shared without renaming


class KeptNamePin(Family):
    name = "pinned to a kept name"

    def lines(self, policy: Policy) -> list[Lines]:
        renamed = Rules.of(policy).renamed_replica
        if shape(policy) != "shared" or renamed is None:
            return []
        holder = all_of([whole_limit(renamed), f"{count(renamed)} > 0"])
        held = any_of(f"has({SPEC}.{section}) && {SPEC}.{section}.exists(c, {holder})" for section in SECTIONS)
        product = f"{SPEC}.nodeSelector[{lit(PRODUCT)}]"
        by_selector = (
            f"has({SPEC}.nodeSelector) && {lit(PRODUCT)} in {SPEC}.nodeSelector && "
            f"{product}.endsWith({lit(SHARED_PRODUCT)})"
        )
        affinity = f"{SPEC}.affinity"
        terms = f"{affinity}.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
        # a term's `In` on the product whose every value ends in -SHARED, read from its values joined by spaces
        # (no deeper nesting: scope.py keeps a value with a space, which no label value holds, outside)
        pins = (
            f"e.key == {lit(PRODUCT)} && e.operator == 'In' && has(e.values) && size(e.values) > 0 && "
            f"(e.values.join(' ') + ' ').matches({lit(f'^([^ ]*{SHARED_PRODUCT} )+$')})"
        )
        by_affinity = all_of(
            [
                f"has({affinity}) && has({affinity}.nodeAffinity) && has({affinity}.nodeAffinity.{REQUIRED})",
                f"has({terms}) && size({terms}) > 0",
                f"{terms}.all(t, has(t.matchExpressions) && t.matchExpressions.exists(e, {pins}))",
            ]
        )
        # each term's first such `In`, as kept_name_pin names them
        products = f"{terms}.map(t, t.matchExpressions.filter(e, {pins})[0].values.join(',')).join(',')"
        by_selector_words = fill(steering.selector_pin_words(slot("product")), {"product": product})
        by_affinity_words = fill(steering.affinity_pin_words(slot("products")), {"products": products})
        sentence = validate.kept_name_pin_line(slot("pinned"), policy.sharing.mode, policy.name, renamed)
        pinned = f"({by_selector}) ? {by_selector_words} : {by_affinity_words}"
        line = fill(validate.labelled("pod", sentence), {"pinned": pinned})
        # the pod's node constraints first: most pods have none, and need no pass over their containers
        return [Lines(f"((({by_selector}) || ({by_affinity})) && ({held})) ? [{line}] : []")]


class Steering(Family):
    """Node-pool steering (steering.steer) where the policy steers: the policy's requirements merged into the
    pod's required node affinity by one JSON Patch operation, and a nodeSelector that contradicts them said
    with the engine's sentence (and nothing added then). Its mutation runs last: steering reads the containers
    as the other steps leave them.

    The requirements are the policy's own (steering.requirements) wherever a container holds the resource it
    steers; under a memory backend that reads a pod as a whole (ACK), its multi-GPU ones where the pod's label
    spreads the share over several GPUs, and its whole-GPU ones where a container holds whole GPUs and none a
    share: one mutation and one set of lines each (_variants), for pods that never meet. A term's own
    expressions on a required label are weighed as steering._satisfiable weighs them, each candidate value in one
    pass over the term's expressions (`_term_fits`); scope.py keeps outside what is not (`judged`,
    gaps.product_judged): where the witness would be among several of the term's own values, a test one
    iteration deeper."""

    name = "steering"

    def mutations(self, policy: Policy) -> list[Mutation]:
        return [self._mutation(policy, wanted, steered) for wanted, steered in _variants(policy)]

    def lines(self, policy: Policy) -> list[Lines]:
        return [self._lines(policy, wanted, steered) for wanted, steered in _variants(policy)]

    def _mutation(self, policy: Policy, wanted: tuple[steering.Requirement, ...], steered: str) -> Mutation:
        """The requirements `wanted` merged where `steered` holds (one of _variants)."""
        at = f"{AT} + {lit('/affinity')}"
        affinity = f"{SPEC}.affinity"
        node = f"{affinity}.nodeAffinity"
        required = f"{node}.{REQUIRED}"
        terms = f"{required}.nodeSelectorTerms"
        # a term's expressions (`k`) without 0.1.0's where steering takes it out, and the requirements they lack (`m`)
        drops = backend_of(policy).drops_single_strategy()
        kept = f"(has(t.matchExpressions) ? {_copied('t.matchExpressions')} : [])"
        if drops:
            kept_ones = f"t.matchExpressions.filter(e, !({_restates(OBSOLETE)}))"
            kept = f"(has(t.matchExpressions) ? {_copied(kept_ones)} : [])"
        missing = " + ".join(f"(k.exists(e, {_restates(r)}) ? [] : [{_literal(r.expression)}])" for r in wanted)
        stale = f"has(t.matchExpressions) && t.matchExpressions.exists(e, {_restates(OBSOLETE)})" if drops else ""
        live = LIVE
        fields = _copied("t.matchFields")
        merged = (
            f"has(t.matchFields) ? {{'matchExpressions': dyn(k + m), 'matchFields': dyn({fields})}} "
            ": {'matchExpressions': dyn(k + m)}"
        )
        expressions = _copied("t.matchExpressions")
        # a term left as it is, written anew (see _copied)
        same = (
            f"has(t.matchExpressions) && has(t.matchFields) ? "
            f"{{'matchExpressions': dyn({expressions}), 'matchFields': dyn({fields})}} : "
            f"has(t.matchExpressions) ? {{'matchExpressions': dyn({expressions})}} : "
            f"has(t.matchFields) ? {{'matchFields': dyn({fields})}} : {{}}"
        )
        changed = any_of(filter(None, ["size(m) > 0", stale]))
        # each term as steering leaves it, with whether it changed: an empty term stays empty
        each_term = bind(kept, "k", bind(missing, "m", f"({live}) && ({changed}) ? [{merged}] : []"))
        new_terms = f"{terms}.map(t, [{each_term}].map(n, size(n) > 0 ? n[0] : ({same}))[0])"
        changes = f"{terms}.exists(t, size({each_term}) > 0)"
        added = steering.required_affinity(wanted)
        to = {part: f"{at} + {lit(part)}" for part in ("/nodeAffinity", f"/nodeAffinity/{REQUIRED}")}
        to["terms"] = f"{at} + {lit(f'/nodeAffinity/{REQUIRED}/nodeSelectorTerms')}"
        ops = (
            f"!has({affinity}) ? [{jsonpatch('add', at, _literal({'nodeAffinity': added}))}] : "
            f"!has({node}) ? [{jsonpatch('add', to['/nodeAffinity'], _literal(added))}] : "
            f"!has({required}) || !has({terms}) || size({terms}) == 0 ? "
            f"[{jsonpatch('add', to[f'/nodeAffinity/{REQUIRED}'], _literal(added[REQUIRED]))}] : "
            f"({changes}) ? [{jsonpatch('add', to['terms'], new_terms)}] : []"
        )
        conflict = any_of([*(_clash(r) for r in wanted), _product_clash(policy), _affinity_clash(policy, wanted)])
        return Mutation("steering", f"({steered}) && !({conflict}) ? ({ops}) : []")

    def _lines(self, policy: Policy, wanted: tuple[steering.Requirement, ...], steered: str) -> Lines:
        words, advice = steering.policy_words(policy), steering.advice(policy)
        said = []
        for r in wanted:
            shown = f"{lit(r.key + '=')} + {SELECTOR}[{lit(r.key)}]"
            line = fill(steering.selector_conflict_line(slot("shown"), words, str(r), advice), {"shown": shown})
            said.append(f"(({_clash(r)}) ? [{line}] : [])")
        shown = f"{lit(PRODUCT + '=')} + {SELECTOR}[{lit(PRODUCT)}]"
        needed = steering.product_rule(policy) or ""
        line = fill(steering.selector_conflict_line(slot("shown"), words, needed, advice), {"shown": shown})
        said.append(f"(({_product_clash(policy)}) ? [{line}] : [])")
        said.append(_affinity_line(policy, wanted, words, advice))
        return Lines(f"({steered}) ? ({' + '.join(said)}) : []")


SELECTOR = f"{SPEC}.nodeSelector"


def _wanted(policy: Policy) -> tuple[steering.Requirement, ...]:
    """The requirements compiled: the policy's, under the modes whose GPU rules are compiled."""
    return steering.requirements(policy) if shape(policy) is not None else ()


def _variants(policy: Policy) -> list[tuple[tuple[steering.Requirement, ...], str]]:
    """The requirements a pod gets, each with when (steering.pod_requirements): the policy's where a container
    holds the resource it steers, a memory backend's multi-GPU ones instead where the pod's label spreads that
    over several GPUs (spreads.py), its whole-GPU ones where a container holds `nvidia.com/gpu` and none the
    resource steered (ACK's exclusive pool)."""
    wanted = _wanted(policy)
    if not wanted:
        return []
    held = _steered(policy)
    multi, whole = steering.multi_requirements(policy), steering.whole_requirements(policy)
    spec = spec_of(policy)
    found = [(wanted, held)]
    if multi and multi != wanted and spec is not None and spec.spread_label:
        several = spreads.several_gpus(spec)
        found = [(wanted, f"({held}) && !({several})"), (multi, f"({held}) && ({several})")]
    if whole:
        found.append((whole, f"!({held}) && ({_steered(policy, NVIDIA_GPU)})"))
    return found


def _steered(policy: Policy, name: str | None = None) -> str:
    """The pod is steered: it names no node and a container or init container holds the resource the policy
    steers (steering.pod_requirements), or `name`."""
    name = name or steering.steered_resource(policy)
    held = any_of(
        f"{holds(which, name)} && quantity({value(which, name)}).compareTo(quantity('0')) > 0"
        for which in ("limits", "requests")
    )
    sections = any_of(f"has({SPEC}.{section}) && {SPEC}.{section}.exists(c, {held})" for section in SECTIONS)
    return f"!(has({SPEC}.nodeName) && {SPEC}.nodeName != '') && ({sections})"


def _clash(r: steering.Requirement) -> str:
    """The nodeSelector names `r`'s label with a value `r` does not admit (steering._selector_conflicts)."""
    found = f"{SELECTOR}[{lit(r.key)}]"
    admits = {
        "In": f"{found} in {strings(r.values)}",
        "NotIn": f"!({found} in {strings(r.values)})",
        "Exists": "true",
        "DoesNotExist": "false",
    }[r.operator]
    return f"has({SELECTOR}) && {lit(r.key)} in {SELECTOR} && !({admits})"


TERMS = f"{SPEC}.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
LIVE = any_of(f"has(t.{part}) && size(t.{part}) > 0" for part in ("matchExpressions", "matchFields"))


# A `Gt` or `Lt` bound that Python's int() (steering.label_integer) and CEL's int() (Go's ParseInt) read alike, as
# the same int64: ASCII digits after an optional sign (scope.py keeps any other that Python reads outside).
PLAIN_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
NAMING = ("In", "Gt", "Lt")  # the operators that name the present values a node may have
RANGE = ("Gt", "Lt", "Exists", "DoesNotExist")  # a term's own that leave a range of integers, or none
# The most pairs of an `In`'s values and the values excluded beside it that `_own_witness` compares in one term
# (`sets.contains` costs their product): more is left to the webhook (`judged`), so that a hostile term cannot
# run a policy past its runtime cost budget.
MOST_PAIRS = 1024
NUL = "\\x00"  # a NUL character as an escape (written in a CEL string literal, or read by a regular expression)


def judged(r: steering.Requirement, own: list[dict[str, Any]], on_key: list[dict[str, Any]]) -> bool:
    """Whether the compiled policies tell when a term's own expressions `own` on `r`'s label (those that do not
    restate `r`) leave no node that `r` admits (`_term_fits`): always, but where `r` admits values no expression
    names (`NotIn`, `Exists`) and several of its own, an `In` beside another, a `Gt`, `Lt` or `DoesNotExist`, or
    a `NotIn` beside a `Gt` or `Lt`, narrow the values a node may have (the witness would be among the term's own
    values, tested against each other expression: one iteration deeper), and where a
    `Gt` or `Lt` bound reads otherwise in CEL (gaps.STEERED_LABELS). `on_key`: the term's expressions on the
    label, restatements of `r` among them (`_pairs`: past MOST_PAIRS the webhook's)."""
    if r.operator != "DoesNotExist" and any(_odd_bound(e) for e in own):
        return False
    unnamed = steering.matches(r.expression, {r.key: steering.UNNAMED})
    if not unnamed or len(own) <= 1 or not any(e.get("operator") in NAMING for e in own):
        return True
    operators = [e.get("operator") for e in own]
    if operators.count("In") == 1 and all(op in ("In", "NotIn", "Exists") for op in operators):
        notins = [e for e in on_key if e.get("operator") == "NotIn"]
        if all(set(e.get("values") or ()) <= set(r.values) for e in notins):
            return True  # they exclude nothing `r` does not (`_one_in`)
        return _pairs(on_key, r) <= MOST_PAIRS  # the In's values less the NotIns' (`_own_witness`)
    return all(op in RANGE for op in operators)  # a range of integers (`_range_fits`)


def _pairs(on_key: list[dict[str, Any]], r: steering.Requirement) -> int:
    """The pairs `_own_witness` compares in a term whose expressions on `r`'s label are `on_key` (restatements
    of `r` among them): the `In`'s values times the values excluded beside it, the `NotIn`s' and `r`'s."""
    named = sum(len(e.get("values") or ()) for e in on_key if e.get("operator") == "In")
    excluded = sum(len(e.get("values") or ()) for e in on_key if e.get("operator") == "NotIn")
    return named * (excluded + len(r.values))


def _odd_bound(expression: dict[str, Any]) -> bool:
    """A `Gt` or `Lt` whose one value Python's int() reads as an integer and CEL's otherwise."""
    values = expression.get("values")
    if expression.get("operator") not in ("Gt", "Lt") or type(values) is not list or len(values) != 1:
        return False
    bound = values[0]
    return steering.label_integer(bound) is not None and not PLAIN_INTEGER.fullmatch(bound)


def _term_fits(r: steering.Requirement) -> str:
    """Some value of `r`'s label, or its absence, satisfies every expression of the term `t` on that label, `r`'s
    own among them (steering._satisfiable): each candidate the engine tries that `r` admits, tested in one pass
    over the term's expressions: the label's absence, a value none names, each value `r` names; and where `r`
    admits values it does not name, a value of the term's one own `In` there that its `NotIn`s leave, or an
    integer within its own `Gt`
    and `Lt` bounds (`judged` keeps the rest outside)."""
    on = f"e.key == {lit(r.key)}"
    ways = []
    if steering.matches(r.expression, {}):
        ways.append(f"t.matchExpressions.all(e, !({on}) || e.operator in ['NotIn', 'DoesNotExist'])")
    unnamed = steering.matches(r.expression, {r.key: steering.UNNAMED})
    if unnamed:
        ways.append(f"t.matchExpressions.all(e, !({on}) || e.operator in ['NotIn', 'Exists'])")
    for named in r.values:
        if steering.matches(r.expression, {r.key: named}):
            ways.append(f"t.matchExpressions.all(e, !({on}) || ({_admits(named)}))")
    if unnamed:
        ways += [_one_in(r), _own_witness(r), _range_fits(r)]
    return f"!has(t.matchExpressions) || {any_of(ways)}"


def _range_fits(r: steering.Requirement) -> str:
    """The term `t`'s expressions on `r`'s label are `Gt`, `Lt`, `Exists` and restatements of `r` (which admits
    values it does not name), every bound an integer, and some integer between the greatest `Gt` and the least
    `Lt` is not one `r` excludes. The engine tries the integers just past each bound, more of them than `r`
    names, so it finds one wherever there is one."""
    on = f"e.key == {lit(r.key)}"
    bounded = f"e.operator in ['Gt', 'Lt'] && {_integer_bound()}"
    only = f"t.matchExpressions.all(e, !({on}) || ({bounded}) || e.operator == 'Exists' || ({_restates(r)}))"
    each = {
        op: f"t.matchExpressions.filter(e, {on} && e.operator == {lit(op)}).map(e, int(e.values[0]))"
        for op in ("Gt", "Lt")
    }
    # the integers `r` names as a label value reads them (the engine's candidates are written by str())
    excluded = [n for n in map(steering.label_integer, r.values) if n is not None and str(n) in r.values]
    within = " + ".join(f"(g.max() < {n} && {n} < l.min() ? 1 : 0)" for n in excluded) or "0"
    room = f"size(g) == 0 || size(l) == 0 ? true : l.min() - g.max() - 1 > {within}"
    return f"({only}) ? {bind(each['Gt'], 'g', bind(each['Lt'], 'l', room))} : false"


def _integer_bound(e: str = "e") -> str:
    """`e` is a `Gt` or `Lt` whose one value CEL reads as an integer (`PLAIN_INTEGER`)."""
    return f"has({e}.values) && size({e}.values) == 1 && {e}.values[0].matches({lit(f'^{PLAIN_INTEGER.pattern}$')})"


def _admits(value: str) -> str:
    """The expression `e` admits a node whose label is `value`, a constant (steering.matches)."""
    named = f"(has(e.values) && {lit(value)} in e.values)"
    number = steering.label_integer(value)
    compared = {
        op: f"({_integer_bound()} && {number} {sign} int(e.values[0]))" if number is not None else "false"
        for op, sign in (("Gt", ">"), ("Lt", "<"))
    }
    return (
        f"e.operator == 'In' ? {named} : e.operator == 'NotIn' ? !{named} : e.operator == 'Exists' || "
        f"(e.operator == 'Gt' && {compared['Gt']}) || (e.operator == 'Lt' && {compared['Lt']})"
    )


def _one_in(r: steering.Requirement) -> str:
    """The term `t`'s expressions on `r`'s label are `In`, `Exists` and `NotIn`s that exclude no value `r` does
    not (restatements of `r` among them), and an `In` names a value `r` does not exclude, read from its values
    joined at NUL (scope.py keeps NUL out of every value): in one pass, however many values."""
    on = f"x.key == {lit(r.key)}"
    joined = f"('{NUL}' + x.values.join('{NUL}') + '{NUL}')"
    pattern = "^(" + NUL + "(" + "|".join(re.escape(v) for v in r.values) + "))+" + NUL + "$"
    excluded = f"has(x.values) && size(x.values) > 0 && {joined}.matches({lit(pattern)})" if r.values else "false"
    harmless = f"x.operator in ['In', 'Exists'] || (x.operator == 'NotIn' && {excluded})"
    kinds = f"t.matchExpressions.all(x, !({on}) || {harmless})"
    named = f"has(x.values) && size(x.values) > 0 && !({excluded})"
    return f"({kinds}) && t.matchExpressions.exists(x, {on} && x.operator == 'In' && {named})"


def _own_witness(r: steering.Requirement) -> str:
    """The term `t`'s expressions on `r`'s label (which admits values it does not name) are one `In`, `NotIn`s and
    `Exists` (restatements of `r` among them), and the `In` names a value that no `NotIn` there excludes, nor `r`:
    `sets.contains` (Kubernetes 1.29's CEL) of the excluded values, the `NotIn`s' joined and split at NUL (which
    scope.py keeps out of every value), and `r`'s. A `Gt` or `Lt`: `_range_fits`."""
    on = f"x.key == {lit(r.key)}"
    kinds = f"t.matchExpressions.all(x, !({on}) || x.operator in ['In', 'NotIn', 'Exists'])"
    ins = f"t.matchExpressions.filter(x, {on} && x.operator == 'In')"
    notins = f"t.matchExpressions.filter(x, {on} && x.operator == 'NotIn' && has(x.values) && size(x.values) > 0)"
    joined = f"n.map(x, x.values.join('{NUL}')).join('{NUL}').split('{NUL}')"
    excluded = bind(notins, "n", f"size(n) == 0 ? {strings(r.values)} : {joined} + {strings(r.values)}")
    within = f"size(i[0].values) * size(z) <= {MOST_PAIRS}"
    named = f"size(i) == 1 && has(i[0].values) && {bind(excluded, 'z', f'{within} && !sets.contains(z, i[0].values)')}"
    return f"({kinds}) && {bind(ins, 'i', named)}"


def _term_clash(r: steering.Requirement) -> str:
    """The term `t`'s expressions on `r`'s label leave no node that `r` admits (steering._term_conflicts)."""
    return f"!({_term_fits(r)})"


def _term_product_clash(policy: Policy) -> str:
    """The term `t` has an `In` on the product label none of whose values the pool's nodes carry
    (steering._term_conflicts), read from the values joined by spaces (scope.py keeps a value with a space
    outside)."""
    fit = backend_of(policy).product_fit(policy)
    joined = "(' ' + e.values.join(' ') + ' ')"
    if fit.ends and not (fit.not_ends or fit.not_holds):
        none_fits = f"!{joined}.matches({lit(f' [^ ]*{re.escape(fit.ends)} ')})"
    elif not fit.ends and (fit.not_ends or fit.not_holds):
        tokens = [f"[^ ]*{re.escape(tail)}" for tail in fit.not_ends]
        tokens += [f"[^ ]*{re.escape(part)}[^ ]*" for part in fit.not_holds]
        pattern = "^( (" + "|".join(tokens) + "))+ $"
        none_fits = f"{joined}.matches({lit(pattern)})"
    else:
        return "false"  # every product fits; or not judged (scope.py)
    product_in = f"e.key == {lit(PRODUCT)} && e.operator == 'In' && has(e.values)"
    return (
        f"has(t.matchExpressions) && t.matchExpressions.exists(e, {product_in} && (size(e.values) == 0 || {none_fits}))"
    )


def _affinity_clash(policy: Policy, wanted: tuple[steering.Requirement, ...]) -> str:
    """Every live term of the required node affinity excludes the policy's pool (steering._affinity_conflict)."""
    clash = any_of([*(_term_clash(r) for r in wanted), _term_product_clash(policy)])
    return (
        f"has({SPEC}.affinity) && has({SPEC}.affinity.nodeAffinity) && has({SPEC}.affinity.nodeAffinity.{REQUIRED})"
        f" && has({TERMS}) && {TERMS}.exists(t, {LIVE}) && {TERMS}.all(t, !({LIVE}) || ({clash}))"
    )


def _affinity_line(policy: Policy, wanted: tuple[steering.Requirement, ...], words: str, advice: str) -> str:
    """The affinity conflict's line: the labels on which the live terms clash, sorted, and what the policy needs
    on them, in its order, the product's rule last."""
    clashes = {r.key: f"{TERMS}.exists(t, ({LIVE}) && ({_term_clash(r)}))" for r in wanted}
    clashes[PRODUCT] = f"{TERMS}.exists(t, ({LIVE}) && ({_term_product_clash(policy)}))"
    labels = " + ".join(f"({clashes[key]} ? [{lit(key)}] : [])" for key in sorted(clashes))
    needed = " + ".join(f"({clashes[r.key]} ? [{lit(str(r))}] : [])" for r in wanted)
    needed += f" + ({clashes[PRODUCT]} ? [{lit(steering.product_rule(policy) or '')}] : [])"
    count = f"size({TERMS}.filter(t, {LIVE}))"
    many = fill(steering.terms_words(slot("count")), {"count": f"string({count})"})
    which = f"{count} == 1 ? {lit(steering.terms_words(1))} : {many}"
    sentence = steering.affinity_conflict_line(slot("labels"), words, slot("which"), slot("needed"), advice)
    line = fill(sentence, {"labels": f"({labels}).join(', ')", "which": which, "needed": f"({needed}).join('; ')"})
    return f"(({_affinity_clash(policy, wanted)}) ? [{line}] : [])"


def _product_clash(policy: Policy) -> str:
    """The nodeSelector names a product the policy's nodes do not carry (the backend's ProductFit)."""
    fit = backend_of(policy).product_fit(policy)
    product = f"{SELECTOR}[{lit(PRODUCT)}]"
    fits = all_of(
        [
            *([f"{product}.endsWith({lit(fit.ends)})"] if fit.ends else []),
            *(f"!{product}.endsWith({lit(tail)})" for tail in fit.not_ends),
            *(f"!{product}.contains({lit(part)})" for part in fit.not_holds),
        ]
    )
    return f"has({SELECTOR}) && {lit(PRODUCT)} in {SELECTOR} && !({fits})"


def _restates(r: steering.Requirement) -> str:
    """The expression `e` is `r` itself, its values in any order (steering.restates)."""
    same = f"e.key == {lit(r.key)} && e.operator == {lit(r.operator)}"
    if not r.values:
        return f"{same} && !(has(e.values) && size(e.values) > 0)"
    if list(r.values) != sorted(set(r.values)):
        return "false"  # steering never finds such a requirement among a term's: it sorts the term's values
    return f"{same} && has(e.values) && size(e.values) == {len(r.values)} && {strings(r.values)}.all(v, v in e.values)"


def _copied(requirements: str) -> str:
    """A list of node selector requirements read from the object, written anew as CEL maps: the API server's CEL
    holds the object's own values as its typed structs, which a JSON Patch value cannot carry ("could not marshal
    to JSON"), nor a list of strings read from it, while maps and lists built in the expression it can."""
    each = "{'key': dyn(e.key), 'operator': dyn(e.operator)"
    # the values as a new list of the same strings, without a third iteration: joined and split at NUL, which no
    # label value holds
    values = "(size(e.values) == 0 ? [] : e.values.join('\\x00').split('\\x00'))"
    return f"{requirements}.map(e, has(e.values) ? {each}, 'values': dyn({values})}} : {each}}})"


def _literal(data: Any) -> str:
    """JSON data (maps, lists, strings) as a CEL literal. The API server's CEL checks aggregate literals as
    homogeneous (a string beside a list in a map, or two maps of different value types in a list, do not
    compile): every map's values are `dyn`, so every map is a map(string, dyn)."""
    if isinstance(data, dict):
        return "{" + ", ".join(f"{lit(key)}: dyn({_literal(item)})" for key, item in data.items()) + "}"
    if isinstance(data, list | tuple):
        return "[" + ", ".join(_literal(item) for item in data) + "]"
    assert isinstance(data, str)
    return lit(data)
