"""What the native policies cost, bounded without an API server.

The API server stops an evaluation that runs past its runtime cost budget (each expression's, and the policy's
for one request); it does not refuse an admission policy for its estimated cost, which for an untyped object is
unbounded (docs/native-policies.md, Cost). Here the compiled expressions are bounded by their shape, and the
largest pod is run through them:

- no expression nests iterations over the pod more than two deep (containers, then a container's env or
  resource names); an iteration over a list written in the expression is a constant and does not count;
- no expression passes over a section's containers more often than the limits step does, the largest: a
  filter (then a map over what it keeps) and an `indexOf` for each managed resource name and for the empty
  limits map, in both sections;
- `indexOf` (a pass over a section, to find a container's place by its name) counted as one more pass: a
  mutation is at most quadratic in a section's containers (its JSON Patch paths), a validation at most cubic in
  the init containers (the pod's effective total compares each sidecar's place with each regular init
  container's);
- a pod of 30 containers with 100 env vars each (whole GPUs, and fractions that become replicas) goes through
  the compiled set, with the webhook's verdict and containers, and its wall time in the test evaluator is
  printed (`pytest -s`);
- no expression is longer than a quarter of cel-go's default parser limit (the longest is printed).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import kube_cel, yamldocs
from tests.engine_support import container, pod
from tests.test_native_policies import FRACTION_NATIVE, NATIVE, POLICIES, compare, decoded
from webhook.admission.base.resources import MANAGED_NAMES
from webhook.admission.engine import evaluate

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = list(yamldocs.load_all((ROOT / "manifests" / "native-policies" / "native-policies.yaml").read_text()))
MACRO = re.compile(r"\.(exists_one|exists|all|map|filter)\(")
SECTION_PASS = re.compile(
    r"(?:object|variables)\.spec\.(containers|initContainers)\.(exists_one|exists|all|map|filter|indexOf)\("
)
# both sections: the containers found once, and each operation's place (the map, each name, those judged by prefix)
MOST_PASSES = 2 * (1 + 1 + len(MANAGED_NAMES) + 1)


def expressions(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every CEL expression of the objects, with where it is."""
    found = []
    for obj in objects:
        spec, name = obj["spec"], f"{obj['kind']} {obj['metadata']['name']}"
        found += [(f"{name} matchCondition", c["expression"]) for c in spec.get("matchConditions", [])]
        found += [(f"{name} mutation", m["jsonPatch"]["expression"]) for m in spec.get("mutations", [])]
        found += [(f"{name} variable {v['name']}", v["expression"]) for v in spec.get("variables", [])]
        for validation in spec.get("validations", []):
            found += [(f"{name} validation", validation["expression"])]
            found += [(f"{name} message", validation["messageExpression"])]
    return found


# The corpus's set, the shipped one, and the fractions' (every variable a fraction is written into, with MPS's),
# each expression once, named by where it is first (the fractions' set holds the corpus's policies, and most of a
# policy's expressions, a resource's pod total among them, are the same text in every policy).
EXPRESSIONS = list(
    {
        source: (where, source)
        for where, source in reversed(
            expressions(NATIVE.objects) + expressions(SHIPPED) + expressions(FRACTION_NATIVE.objects)
        )
    }.values()
)[::-1]
PARSER_LIMIT = 100_000  # cel-go's default parser limit on an expression's size, in code points
# The most the compiled expressions take, a quarter of the parser's limit: an expression that grows with a policy's
# variables or rules (a mutation's operations, a group's lines) is split or has its repeated parts bound once
# before it nears the limit the API server refuses a policy at (on the sets here the longest is about 18,000).
LONGEST = 25_000


@dataclass
class Shape:
    depth: int  # the most iterations over the pod's data open at once
    passes: int  # the same, an indexOf counted as one more (it passes over its list)


def shape(source: str) -> Shape:
    """Scan `source` (string literals skipped) for macros and what they iterate: a macro whose receiver is a list
    literal (`[...]` not indexing anything) is a constant."""
    open_macros: list[tuple[int, bool]] = []  # (paren depth of its call, over the pod's data)
    brackets: list[bool] = []  # for each open [: is it a literal
    last_closed_literal = False
    depth = deepest = passes = 0
    i = 0
    while i < len(source):
        ch = source[i]
        if ch in "'\"":
            i = kube_cel.string_end(source, i)
            continue
        over_data = sum(1 for _, data in open_macros if data)
        if source.startswith(".indexOf(", i):
            passes = max(passes, over_data + 1)
        found = MACRO.match(source, i)
        if found:
            depth += 1
            open_macros.append((depth, not (source[i - 1] == "]" and last_closed_literal)))
            deepest = max(deepest, over_data + open_macros[-1][1])
            i = found.end()
            continue
        if ch == "[":
            before = source[:i].rstrip()
            brackets.append(not before or not (before[-1].isalnum() or before[-1] in "_.)]"))
        elif ch == "]":
            last_closed_literal = brackets.pop()
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if open_macros and open_macros[-1][0] == depth:
                open_macros.pop()
            depth -= 1
        i += 1
    return Shape(deepest, max(passes, deepest))


def test_the_scanner_tells_data_from_a_written_list_and_counts_a_lookup_as_a_pass() -> None:
    assert shape("object.spec.containers.exists(c, c.env.exists(e, ['A', 'B'].exists(p, e.name == p)))").depth == 2
    assert shape("object.spec.containers.exists(c, has(c.env))").depth == 1
    assert shape("x[0].exists(c, true)").depth == 1  # an index, not a literal
    assert shape("object.spec.containers.filter(c, true).map(c, object.spec.containers.indexOf(c))") == Shape(1, 2)
    assert shape("a.map(c, b.filter(s, a.indexOf(s) < a.indexOf(c)).size())") == Shape(2, 3)


@pytest.mark.parametrize(("where", "source"), EXPRESSIONS, ids=[where for where, _ in EXPRESSIONS])
def test_no_expression_iterates_over_the_pod_more_than_two_deep(where: str, source: str) -> None:
    assert shape(source).depth <= 2


@pytest.mark.parametrize(("where", "source"), EXPRESSIONS, ids=[where for where, _ in EXPRESSIONS])
def test_each_expression_passes_over_a_section_a_bounded_number_of_times(where: str, source: str) -> None:
    """A mutation's JSON Patch paths make it quadratic in a section's containers; the pod's effective total
    (each regular init container, each sidecar started before it, their places compared) cubic in its init
    containers; nothing more."""
    assert len(SECTION_PASS.findall(source)) <= MOST_PASSES
    assert shape(source).passes <= (2 if " mutation" in where else 3)


def test_the_limits_step_is_the_bound() -> None:
    """The bound is met, not loose: the limits step makes MOST_PASSES passes."""
    assert max(len(SECTION_PASS.findall(source)) for _, source in EXPRESSIONS) == MOST_PASSES


def _map_literals(source: str) -> list[list[str]]:
    """The values of each map literal written in `source` (`{'key': value, ...}`, not a `JSONPatch{...}`), as text."""
    return _literals(source)[0]


def _literals(source: str) -> tuple[list[list[str]], list[list[str]]]:
    """The values of each map literal, and the elements of each list literal, written in `source`, as text."""
    found, lists, stack, i = [], [], [], 0
    while i < len(source):
        char = source[i]
        if char == "'":  # a string literal: skip it, escapes and all
            i += 1
            while source[i] != "'":
                i += 2 if source[i] == "\\" else 1
        elif char in "([{":
            literal = char == "{" and not source[:i].rstrip().endswith("JSONPatch")
            stack.append((char, literal, [i + 1]))
        elif char in ")]}":
            opener, literal, cuts = stack.pop()
            parts = [source[a:b].rstrip(",").strip() for a, b in zip(cuts, [*cuts[1:], i], strict=True)]
            if literal:
                found.append([part.split(":", 1)[1].strip() for part in parts if ":" in part])
            elif opener == "[":
                lists.append(parts)
        elif char == "," and stack and stack[-1][0] in "{[":
            stack[-1][2].append(i + 1)
        i += 1
    return found, lists


def _kind(value: str) -> str:
    if value.startswith("dyn("):
        return "dyn"
    if re.fullmatch(r"'(?:[^'\\]|\\.)*'", value):
        return "string"
    kind = {"[": "list", "{": "map"}.get(value[:1], "expression")
    return kind if kind == "expression" or _closes_at_end(value) else "expression"


def _closes_at_end(value: str) -> bool:
    """The bracket `value` opens with is closed by its last character (a literal, not `[...].map(...)`)."""
    depth, i = 0, 0
    while i < len(value):
        if value[i] == "'":
            i += 1
            while value[i] != "'":
                i += 2 if value[i] == "\\" else 1
        elif value[i] in "([{":
            depth += 1
        elif value[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i == len(value) - 1
        i += 1
    return False


def test_the_map_literals_hold_one_type_of_value_or_dyn() -> None:
    """The API server's CEL checks aggregate literals as homogeneous (cel.HomogeneousAggregateLiterals): a map
    written with a string beside a list, or a list of a map(string, dyn) beside a map(string, string), fails to
    compile there, though the tests' evaluator runs it. Each map literal's values written as literals are of one
    kind, or wrapped in dyn(), and a list's map literals are all dyn-valued or none."""
    assert [_kind(v) for v in _map_literals("{'a': 'x', 'b': ['y'], 'c': dyn(['z'])}")[0]] == ["string", "list", "dyn"]
    assert _literals("[{'a': dyn('x')}, {'a': 'y'}]")[1] == [["{'a': dyn('x')}", "{'a': 'y'}"]]
    for where, source in EXPRESSIONS:
        maps, lists = _literals(source)
        for values in maps:
            kinds = {_kind(value) for value in values} - {"dyn", "expression"}
            assert len(kinds) <= 1, (where, values)
        for elements in lists:  # a list of map literals: maps of one value type (each all dyn, or none dyn)
            written = [_map_literals(e)[-1] for e in elements if _kind(e) == "map"]
            assert len({all(_kind(v) == "dyn" for v in values) for values in written}) <= 1, (where, elements)


def test_no_expression_is_longer_than_the_parser_takes() -> None:
    """The longest expression (printed with `pytest -s`) is well under cel-go's default parser limit."""
    size, where = max((len(source), where) for where, source in EXPRESSIONS)
    print(f"\nthe longest expression: {where}, {size} characters")
    assert size <= LONGEST < PARSER_LIMIT


def _largest(gpu: int | str) -> dict[str, Any]:
    return pod(
        *(
            container(
                f"c{i}", limits={"nvidia.com/gpu": gpu}, env=[{"name": f"V{j}", "value": str(j)} for j in range(100)]
            )
            for i in range(30)
        )
    )


LARGEST = _largest(1)


@pytest.mark.parametrize(
    ("namespace", "gpu"),
    [
        ("default", 1),  # the built-in defaults: 30 GPUs in a pod, over the per-pod maximum of 8
        # fractional: shared under MPS: every container renamed to a replica, its fraction and its variables
        # appended; warned: 30 replicas over the per-pod maximum. Time-slicing's whole GPUs and fractions are the
        # same rename and fewer variables (about 4 s here, measured outside the suite; test_native_policies
        # compares them on the corpus and the fraction property)
        ("mps-frac", "100m"),
    ],
)
def test_the_largest_pod_goes_through_the_compiled_set(namespace: str, gpu: int | str) -> None:
    """Denied (or warned) by both, with the webhook's message and containers; the wall time is the test
    evaluator's (the MAP twice, as reinvoked, then the VAP), not the API server's."""
    largest = _largest(gpu)
    started = time.perf_counter()
    assert compare(namespace, largest) is None
    elapsed = time.perf_counter() - started
    print(f"\n30 containers x 100 env vars in {namespace} ({gpu}): the compiled set in {elapsed:.2f} s")
    assert evaluate(decoded(largest), namespace, POLICIES).verdict in ("deny", "warn")
