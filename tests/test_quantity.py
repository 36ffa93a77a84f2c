"""Quantities follow Kubernetes' resource.Quantity grammar, exactly (examples from the Kubernetes docs)."""

from fractions import Fraction

import pytest

from tests import apiserver_rules, kube_cel
from tests.engine_support import Enforcement, container, pod
from webhook.admission.base.quantity import (
    QuantityError,
    format_fraction,
    parse_quantity,
    quantity_text,
    whole_to_the_api_server,
)
from webhook.admission.engine import evaluate
from webhook.admission.policy.model import Policy, PolicySet


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("1000m", 1),
        ("1e0", 1),
        ("1E0", 1),
        ("1.0", 1),
        ("1.", 1),
        ("+1", 1),
        ("2Ki", 2048),
        ("1Mi", 2**20),
        ("1Gi", 2**30),
        ("1Ei", 2**60),
        ("1k", 1000),
        ("129M", 129_000_000),
        ("1E", 10**18),  # a bare E is the exa suffix
        ("1E3", 1000),  # E followed by digits is an exponent
        ("12e6", 12_000_000),
        ("123Mi", 123 * 2**20),
        ("0", 0),
        ("0.0", 0),
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("250u", Fraction(1, 4000)),
        ("5n", Fraction(1, 200_000_000)),
        ("1e-3", Fraction(1, 1000)),
        ("-1", -1),
        ("9223372036854775807", 2**63 - 1),
        (1, 1),
        (0.5, Fraction(1, 2)),
        (1.0, 1),
        # As the API server reads JSON: white space trimmed, and finer than 1n rounded up (away from zero).
        (" 1\t", 1),
        ("\u00a02\u3000", 2),
        ("0.9999999999", 1),
        ("1e-10", Fraction(1, 10**9)),
        ("-1e-10", -Fraction(1, 10**9)),
        ("1.0000000001", Fraction(1_000_000_001, 10**9)),
        ("1e-999", Fraction(1, 10**9)),
    ],
)
def test_parses_exactly(text, value):
    assert parse_quantity(text) == value


def test_whole_values_are_ints_and_fractions_are_exact():
    assert type(parse_quantity("1000m")) is int
    assert parse_quantity("0.1") == Fraction(1, 10)  # not 0.1000000000000000055...


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "is not a Kubernetes quantity"),
        ("one", "is not a Kubernetes quantity"),
        ("1 2", "is not a Kubernetes quantity"),
        ("\x1c1", "is not a Kubernetes quantity"),  # Python's white space, not Go's
        ("1.2.3", "is not a Kubernetes quantity"),
        ("1Kb", "is not a Kubernetes quantity"),
        ("1ki", "is not a Kubernetes quantity"),
        ("0x10", "is not a Kubernetes quantity"),
        ("1e", "is not a Kubernetes quantity"),
        ("--1", "is not a Kubernetes quantity"),
        ("1e309", "past int64"),
        ("1e999999999", "past int64"),
        ("9223372036854775808", "past int64"),
        ("10E", "past int64"),
        ("9" * 65, "longer than 64 characters"),
        (2**63, "past int64"),
        (float("inf"), "not a finite number"),
        (float("nan"), "not a finite number"),
        (True, "true/false"),
        (None, "expected a string or number, got NoneType"),
        ([1], "expected a string or number, got list"),
        ({"a": 1}, "expected a string or number, got dict"),
    ],
)
def test_refuses_with_a_reason(value, reason):
    with pytest.raises(QuantityError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_quantity(value)


def test_hostile_exponent_is_cheap():
    # 10**999999999 would take minutes; the exponent is bounded before any arithmetic.
    with pytest.raises(QuantityError):
        parse_quantity("1e999999999")
    assert parse_quantity("0e999999999") == 0


def test_the_memo_of_quantity_texts_stays_bounded_and_remembers_refusals():
    from webhook.admission.base import quantity

    for i in range(10_000):  # a hostile review: thousands of distinct values
        parse_quantity(f"{i}m")
    assert len(quantity._TEXT_VALUES) <= quantity._TEXT_VALUES.limit
    for _ in range(2):  # a refusal served from the memo is the same refusal
        with pytest.raises(QuantityError, match="is not a Kubernetes quantity"):
            parse_quantity("1.5.5")
    with pytest.raises(QuantityError, match="longer than 64"):
        parse_quantity("1" * 65)  # too long to be remembered
    assert "1" * 65 not in quantity._TEXT_VALUES


def test_quantity_text_quotes_strings_and_escapes_control_characters():
    assert quantity_text("500m") == '"500m"'
    assert quantity_text(0.5) == "0.5"
    assert quantity_text("a\x00b") == '"a\\x00b"'
    assert quantity_text("x" * 100) == '"' + "x" * 37 + '..."'


@pytest.mark.parametrize(
    ("fraction", "text"),
    [(Fraction(1, 4), "0.25"), (Fraction(1, 3), "0.3333"), (Fraction(2, 3), "0.6666"), (Fraction(1), "1")],
)
def test_format_fraction_rounds_down(fraction, text):
    assert format_fraction(fraction) == text


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        ("1", True),
        ("0.9999999", True),
        ("1999999999n", True),
        ("999m", False),
        ("0.9991", True),
        ("0.998", False),
        ("1001m", False),
    ],
)
def test_the_api_server_takes_a_value_within_a_thousandth_below_a_whole_number_as_whole(text: str, whole: bool) -> None:
    """Its check of an extended resource reads milli-units rounded up, as tests/apiserver_rules.py models it."""
    value = parse_quantity(text)
    assert whole_to_the_api_server(value) is whole
    assert (not apiserver_rules.container_errors("c", {"limits": {"nvidia.com/gpu": text}})) is whole


def test_a_value_the_api_server_takes_as_whole_is_refused_as_fractional_without_saying_it_refuses_it_too() -> None:
    """Under warn the webhook warns of it (the API server admits it), where a fraction it refuses is denied."""
    policies = PolicySet((Policy(name="warned", namespaces=("team",), enforcement=Enforcement.WARN),))
    near = evaluate(pod(container("a", limits={"nvidia.com/gpu": "0.9999999"})), "team", policies)
    assert near.verdict == "warn" and "is fractional, but GPUs are whole devices;" in near.violations[0]
    assert "refuses it anyway" not in near.violations[0]
    half = evaluate(pod(container("a", limits={"nvidia.com/gpu": "500m"})), "team", policies)
    assert half.verdict == "deny" and "(the API server refuses it anyway)" in half.violations[0]


# What Go's apimachinery answers for `resource.ParseQuantity(text).AsInt64()` succeeding (read from quantity.go
# and checked against it): the CEL quantity library's isInteger() in the API server.
GO_AS_INT64 = {
    "1": True, "0": True, "000": True, "-0": True, "+3": True, "-3": True, "1k": True, "1.5k": True,
    "1.000k": True, "1.": True, "1e3": True, "2E1": True, "0e3": True, "9E": True, "50000000G": True,
    "1Ki": True, "1Mi": True, "999Gi": True, "1Ti": True, "123456789012345678": True,
    "1000m": False, "1.0": False, "0.0": False, "00.000": False, "500m": False, "0.5": False, ".5": False,
    "1n": False, "1E-3": False, "1.0001k": False, "1.5Ki": False, "1Pi": False, "7Ei": False,
    "1234567890123456789": False,
}  # fmt: skip


@pytest.mark.parametrize(("text", "integer"), GO_AS_INT64.items())
def test_the_tests_cel_says_is_integer_as_go_does(text: str, integer: bool) -> None:
    """Whole is not enough: a negative scale as written (`1000m`, `1.0`), more than 18 digits, or a binary value
    too large for ParseQuantity's fast path is held otherwise, and AsInt64 refuses it."""
    assert kube_cel.evaluate(f"quantity('{text}').isInteger()", {}) is integer
