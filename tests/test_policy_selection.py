"""Which policy a namespace gets: exact name, then the most literal glob, then file order; and glob ties."""

from __future__ import annotations

import fnmatch
import itertools
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.policy.globs import common_namespace, is_namespace_name, parse_glob
from webhook.admission.policy.globties import GlobTie, glob_ties
from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.policy.model import DEFAULT_POLICY, Policy, PolicySet
from webhook.admission.sharing.registry import backend_of


def policy_set(*policies: tuple[str, list[str]], files: list[str] | None = None) -> PolicySet:
    """Policies named and scoped as given, one per file (a.yaml, b.yaml, ...) unless `files` says otherwise."""
    files = files or [f"{chr(ord('a') + i)}.yaml" for i in range(len(policies))]
    sources: dict[str, str] = {}
    for file, (name, namespaces) in zip(files, policies, strict=True):
        document = textwrap.dedent(
            f"""\
            apiVersion: gpu-admission.io/v1
            kind: GPUPolicy
            metadata: {{name: {name}}}
            spec: {{namespaces: {namespaces!r}}}
            """
        )
        sources[file] = sources[file] + "---\n" + document if file in sources else document
    return parse_policy_sources(sources)


# --- select -------------------------------------------------------------------------------------------------


def test_an_exact_name_beats_any_glob_whatever_the_file_order() -> None:
    policies = policy_set(("glob", ["team-a*", "*"]), ("exact", ["team-a"]))
    selection = policies.select("team-a")
    assert (selection.policy.name, selection.pattern) == ("exact", "team-a")
    assert selection.reason == "exact name 'team-a' in b.yaml#0"


def test_the_glob_with_the_most_literal_characters_wins() -> None:
    policies = policy_set(("broad", ["team-*"]), ("narrow", ["team-ml-*"]), ("all", ["*"]))
    assert policies.select("team-ml-x").policy.name == "narrow"
    assert policies.select("team-ml-x").reason == "glob 'team-ml-*' (8 literal characters) in b.yaml#0"
    assert policies.select("team-cv").policy.name == "broad"
    assert policies.select("other").policy.name == "all"
    assert policies.select("other").reason == "glob '*' (0 literal characters) in c.yaml#0"


def test_wildcards_and_classes_are_not_literal_characters() -> None:
    # "team-[ab]?" has 5 literal characters, "te*m-a?" has 5: a tie, settled by file order.
    policies = policy_set(("classes", ["team-[ab]?"]), ("star", ["te*m-a?"]))
    assert policies.select("team-ax").policy.name == "classes"
    policies = policy_set(("star", ["te*m-a?"]), ("classes", ["team-[ab]?"]))
    assert policies.select("team-ax").policy.name == "star"
    assert policies.select("team-ax").reason == "glob 'te*m-a?' (5 literal characters) in a.yaml#0"


def test_file_name_order_then_document_order_breaks_ties() -> None:
    # "team-*" and "*-prod" both have 5 literal characters.
    policies = policy_set(("second", ["*-prod"]), ("first", ["team-*"]), files=["b.yaml", "a.yaml"])
    assert [p.name for p in policies.policies] == ["first", "second"]
    assert policies.select("team-prod").policy.name == "first"
    policies = policy_set(("one", ["*-prod"]), ("two", ["team-*"]), files=["x.yaml", "x.yaml"])
    assert policies.select("team-prod").policy.name == "one"
    assert policies.select("team-prod").policy.source == "x.yaml#0"


def test_globs_match_the_whole_name_and_are_case_sensitive() -> None:
    policies = policy_set(("p", ["team-?"]))
    assert policies.select("team-a").policy.name == "p"
    assert policies.select("team-ab").policy is DEFAULT_POLICY
    assert policies.select("my-team-a").policy is DEFAULT_POLICY
    assert policies.select("TEAM-A").policy is DEFAULT_POLICY


def test_negated_classes_and_ranges() -> None:
    policies = policy_set(("p", ["ns-[!0-9]*"]))
    assert policies.for_namespace("ns-a1").name == "p"
    assert policies.for_namespace("ns-1a") is DEFAULT_POLICY


def test_without_a_match_the_built_in_defaults_apply() -> None:
    selection = policy_set(("p", ["team-a"])).select("other")
    assert selection.policy is DEFAULT_POLICY
    assert selection.pattern is None
    assert selection.reason == "no policy matches; built-in defaults apply"
    assert PolicySet().for_namespace("anything") is DEFAULT_POLICY
    assert (DEFAULT_POLICY.sharing.mode, DEFAULT_POLICY.enforcement, DEFAULT_POLICY.fractional) == (
        "exclusive",
        "enforce",
        "reject",
    )
    assert (
        backend_of(DEFAULT_POLICY).max_per_container(DEFAULT_POLICY, "replica"),
        DEFAULT_POLICY.limits.max_per_pod,
    ) == (8, 8)


def test_ties_lists_every_equally_specific_glob_winner_first() -> None:
    policies = policy_set(("a", ["team-*"]), ("b", ["*-prod"]), ("c", ["team-prod"]), ("d", ["x*"]))
    assert [(glob, p.name) for glob, p in policies.ties("team-x-prod")] == [("team-*", "a"), ("*-prod", "b")]
    assert policies.ties("team-prod") == []  # an exact name: no glob competes
    assert [(glob, p.name) for glob, p in policies.ties("team-x")] == [("team-*", "a")]
    assert policies.ties("nothing") == []


def test_selection_order_is_the_order_select_tries() -> None:
    policies = policy_set(("a", ["*", "zeta", "team-*"]), ("b", ["alpha", "team-ml-*"]))
    assert [(pattern, p.name, literals) for pattern, p, literals in policies.selection_order()] == [
        ("alpha", "b", None),
        ("zeta", "a", None),
        ("team-ml-*", "b", 8),
        ("team-*", "a", 5),
        ("*", "a", 0),
    ]


# --- Namespace names and globs ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "team-a", "0", "a" * 63, "a--b"])
def test_valid_namespace_names(name: str) -> None:
    assert is_namespace_name(name)


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "a.b", "a" * 64, "é"])
def test_invalid_namespace_names(name: str) -> None:
    assert not is_namespace_name(name)


@pytest.mark.parametrize("pattern", ["*", "team-*", "?", "a[bc]d", "a[!b]", "[a-c]*", "**", "x[-]y", "*[0-9]"])
def test_valid_globs(pattern: str) -> None:
    tokens = parse_glob(pattern)
    example = common_namespace([tokens])
    assert example is not None and fnmatch.fnmatchcase(example, pattern) and is_namespace_name(example)


def test_parse_glob_collapses_double_stars() -> None:
    assert parse_glob("a**b") == parse_glob("a*b")


# --- Finding an example namespace, and ties -----------------------------------------------------------------


def test_common_namespace_is_the_shortest_then_first_example() -> None:
    assert common_namespace([parse_glob("team-*"), parse_glob("*-dev")]) == "team-dev"
    assert common_namespace([parse_glob("a*"), parse_glob("*a")]) == "a"
    assert common_namespace([parse_glob("*")]) == "a"
    assert common_namespace([parse_glob("x*"), parse_glob("y*")]) is None


def test_common_namespace_avoids_what_it_must() -> None:
    required = [parse_glob("a*"), parse_glob("*a")]
    assert common_namespace(required, [parse_glob("a")]) == "aa"
    assert common_namespace(required, [parse_glob("a"), parse_glob("a*a")]) is None


def test_common_namespace_respects_dns_label_rules() -> None:
    dash = frozenset("-")
    assert common_namespace([("*", dash)]) is None  # cannot end with "-"
    assert common_namespace([(dash, "*")]) is None  # nor start with it
    assert common_namespace([("*", dash, "*")]) == "a-a"
    assert common_namespace([parse_glob("?" * 63)]) == "a" * 63
    assert common_namespace([parse_glob("?" * 63 + "*")]) == "a" * 63


ALPHABET = "ab-"  # small enough to enumerate; "c" stands for every other character


@st.composite
def small_globs(draw: st.DrawFn) -> str:
    return "".join(draw(st.lists(st.sampled_from(["a", "b", "-", "?", "*"]), max_size=3)))


@settings(max_examples=100, deadline=None)
@given(small_globs(), small_globs())
def test_common_namespace_agrees_with_brute_force(first: str, second: str) -> None:
    """Two globs of at most 3 tokens share a valid name iff one of at most 6 characters over a, b, c, - exists."""
    try:
        tokens = (parse_glob(first), parse_glob(second))
    except ValueError:
        return  # a glob no namespace matches: rejected at load
    found = common_namespace(tokens)
    names = ("".join(chars) for length in range(1, 7) for chars in itertools.product(ALPHABET + "c", repeat=length))
    brute = next(
        (n for n in names if is_namespace_name(n) and fnmatch.fnmatchcase(n, first) and fnmatch.fnmatchcase(n, second)),
        None,
    )
    assert (found is None) == (brute is None), (first, second, found, brute)
    if found is not None:
        assert is_namespace_name(found)
        assert fnmatch.fnmatchcase(found, first) and fnmatch.fnmatchcase(found, second)
        assert len(found) == len(brute)  # the shortest


def test_glob_ties_between_policies_come_with_an_example() -> None:
    (tie,) = glob_ties(policy_set(("a", ["team-*"]), ("b", ["*-prod"])))
    assert tie.example == "team-prod"
    assert [(glob, p.name) for glob, p in tie.globs] == [("team-*", "a"), ("*-prod", "b")]


def test_an_exact_name_is_not_the_example_of_a_tie() -> None:
    (tie,) = glob_ties(policy_set(("a", ["team-*"]), ("b", ["*-prod", "team-prod"])))
    assert tie.example == "team--prod"


def test_globs_of_one_policy_never_tie() -> None:
    assert glob_ties(policy_set(("a", ["team-*", "*-prod"]))) == []


def test_disjoint_globs_and_unequal_specificity_do_not_tie() -> None:
    assert glob_ties(policy_set(("a", ["x-*"]), ("b", ["y-*"]))) == []
    assert glob_ties(policy_set(("a", ["team-*"]), ("b", ["*"]))) == []
    assert glob_ties(policy_set(("a", ["team-*"]), ("b", ["*-dev"]))) == []  # 5 and 4 literal characters


def test_a_more_specific_glob_can_hide_a_tie_entirely() -> None:
    shadowed = policy_set(("a", ["ab*"]), ("b", ["*ab"]), ("c", ["ab", "ab*ab"]))
    assert glob_ties(shadowed) == []
    partly = policy_set(("a", ["ab*"]), ("b", ["*ab"]), ("c", ["ab*ab"]))
    (tie,) = glob_ties(partly)
    assert tie.example == "ab"


def test_three_globs_that_tie_together_are_one_warning() -> None:
    (tie,) = glob_ties(policy_set(("a", ["a*"]), ("b", ["*a"]), ("c", ["*a*"])))
    assert tie.example == "a"
    assert [(glob, p.name) for glob, p in tie.globs] == [("a*", "a"), ("*a", "b"), ("*a*", "c")]


def test_pairs_that_tie_for_different_namespaces_are_separate_warnings() -> None:
    ties = glob_ties(policy_set(("a", ["x*"]), ("b", ["*x"]), ("c", ["?x?*"])))
    assert [(t.example, [p.name for _, p in t.globs]) for t in ties] == [
        ("x", ["a", "b"]),
        ("xxa", ["a", "c"]),
        ("axx", ["b", "c"]),
    ]


def test_the_shipped_and_example_policies_have_no_ties() -> None:
    from tests.conftest import shipped_and_example_policies

    assert glob_ties(shipped_and_example_policies()) == []


def reference_glob_ties(policy_set: PolicySet) -> list[GlobTie]:
    """`glob_ties` as first written: every pair of equally specific globs, searched with every more specific glob
    and every exact name that both match as shadows. Slow, and plainly what the rule says."""
    order = policy_set.selection_order()
    exact = [name for name, _, literals in order if literals is None]
    globs = [(pattern, policy, literals) for pattern, policy, literals in order if literals is not None]
    found: dict[frozenset[str], GlobTie] = {}
    for index, (a, a_policy, literals) in enumerate(globs):
        for b, b_policy, b_literals in globs[index + 1 :]:
            if b_literals != literals or b_policy is a_policy:
                continue
            shadows = [parse_glob(pattern) for pattern, _, more in globs if more > literals]
            shadows += [
                tuple(frozenset(c) for c in name)
                for name in exact
                if fnmatch.fnmatchcase(name, a) and fnmatch.fnmatchcase(name, b)
            ]
            example = common_namespace((parse_glob(a), parse_glob(b)), shadows)
            if example is None:
                continue
            tied = tuple(policy_set.ties(example))
            if len({id(policy) for _, policy in tied}) > 1:
                found.setdefault(frozenset(pattern for pattern, _ in tied), GlobTie(example, tied))
    return list(found.values())


@st.composite
def small_policy_sets(draw: st.DrawFn) -> PolicySet:
    """Up to 5 policies sharing up to 12 patterns: globs of up to 4 tokens over a, b, -, globs with literal heads
    and tails around a wildcard (what the index keys on), and exact names over a, b."""
    token = st.sampled_from(["a", "b", "-", "?", "*", "[ab]", "[!a]"])
    glob = st.lists(token, min_size=1, max_size=4).map("".join)
    affix = st.text("ab", max_size=2)
    around = st.builds(lambda head, middle, tail: head + middle + tail, affix, st.sampled_from(["*", "?", "*?"]), affix)
    name = st.text("ab", min_size=1, max_size=3)
    patterns = draw(st.lists(glob | around | name, min_size=2, max_size=12, unique=True))
    usable = []
    for pattern in patterns:
        try:
            parse_glob(pattern)
        except ValueError:
            continue  # refused at load: no namespace could match it
        usable.append(pattern)
    owners = draw(st.lists(st.integers(0, 4), min_size=len(usable), max_size=len(usable)))
    policies = [
        Policy(f"p{owner}", tuple(p for p, o in zip(usable, owners, strict=True) if o == owner), source=f"{owner}.yaml")
        for owner in sorted(set(owners))
    ]
    return PolicySet(tuple(policies))


@settings(max_examples=200, deadline=None)
@given(small_policy_sets())
def test_glob_ties_agrees_with_trying_every_pair(policies: PolicySet) -> None:
    """The index and the cheap pair checks leave out only pairs and shadows that cannot matter."""
    assert glob_ties(policies) == reference_glob_ties(policies)


@pytest.mark.parametrize(
    ("first", "second", "example"),
    [
        ("a*b", "*ab", "ab"),  # literal tails of different lengths: one ends the other
        ("*ab", "a*b", "ab"),
        ("ab*", "a*b", "ab"),  # literal heads of different lengths
        ("a*b", "ab*", "ab"),
        ("a?", "?a", "aa"),  # no "*": fixed lengths
        ("a[bc]*", "*b?", "aba"),
        ("a??", "?a", None),  # lengths 3 and 2
        ("ab*", "ba*", None),  # literal heads that differ
        ("*ab", "*bb", None),  # literal tails that differ
    ],
)
def test_pairs_are_ruled_out_only_when_no_name_can_match_both(first: str, second: str, example: str | None) -> None:
    policies = policy_set(("a", [first]), ("b", [second]))
    ties = glob_ties(policies)
    assert [tie.example for tie in ties] == ([example] if example else [])
    assert ties == reference_glob_ties(policies)


def test_glob_ties_across_thousands_of_patterns_finds_exactly_the_ties() -> None:
    """1,000 prefix globs, 1,000 suffix globs and 1,000 exact names, none tying, and two pairs that do: only
    those two are reported (how long this takes is measured in the benchmarks, not asserted here)."""
    policies = [Policy(f"team{i:04d}", (f"team{i:04d}-*", f"team{i:04d}-x")) for i in range(1000)]
    policies += [Policy(f"env{i:04d}", (f"*-env{i:04d}",)) for i in range(1000)]
    policies += [Policy("x", ("te?m0042-x*",)), Policy("y", ("??-env0007",))]
    ties = glob_ties(PolicySet(tuple(policies)))
    assert [(tie.example, [(glob, policy.name) for glob, policy in tie.globs]) for tie in ties] == [
        ("team0042-xa", [("team0042-*", "team0042"), ("te?m0042-x*", "x")]),  # "team0042-x" is an exact name
        ("aa-env0007", [("*-env0007", "env0007"), ("??-env0007", "y")]),
    ]
