"""Kubernetes `resource.Quantity` parsing, exact (no floats).

Grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go):
    <quantity>     ::= <signedNumber><suffix>
    <number>       ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>       ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>     ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>    ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
A JSON number is read from its text the same way. As the API server reads JSON, white space around the text
is ignored (Quantity.UnmarshalJSON trims it), and a value finer than 1n is rounded up, away from zero, to the
next 1n (ParseQuantity: "if you want some resources, you should get some": `0.9999999999` is 1). Values past
int64 are refused: the API server cannot represent them as whole device counts, and refusing early keeps
hostile exponents (`1e999999999`) cheap.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

from webhook.admission.base.memo import BoundedMemo
from webhook.admission.base.violation import cut

INT64_MAX = 2**63 - 1
MAX_TEXT = 64  # longer than any quantity a person writes; bounds the cost of hostile input
MAX_EXPONENT = 40  # past int64 even for the smallest mantissa that matters

_PATTERN = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's str.strip would also take \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
NANO = 10**9
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class QuantityError(ValueError):
    """A value that is not a usable Kubernetes quantity; the message says why, for people."""


def quantity_text(value: object) -> str:
    """The value as the user wrote it, for messages (`"500m"`, `0.5`)."""
    if isinstance(value, str):
        shown = cut(value, 40)
        return '"' + shown.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
    if isinstance(value, bool) or value is None:
        return "true" if value is True else "false" if value is False else "null"
    if isinstance(value, int | float | Decimal):
        text = str(value)
        return cut(text, 40)
    return f"a {type(value).__name__}"


_PLAIN_DECIMAL = re.compile(r"\+?(\d+\.?\d*|\.\d+)")


def quantity_shown(value: object, amount: int | Fraction | None, unit: str = "") -> str:
    """The value as written, and what it means where the text does not say so plainly: `"500m" (0.5 GPU)`.

    The API server sends webhooks a quantity in its canonical form (`0.5` arrives as `"500m"`), which is not what
    the user wrote: a message names both.
    """
    text = quantity_text(value)
    if amount is None or amount < 0 or written_plainly(value):
        return text
    return f"{text} ({format_fraction(Fraction(amount), 9)}{unit})"  # quantities are exact to 1n


def written_plainly(value: object) -> bool:
    """Whether a quantity's text says its value as a plain decimal (`0.5`, not `500m` or `5e-1`)."""
    return not isinstance(value, str) or _PLAIN_DECIMAL.fullmatch(value.strip()) is not None


def parse_quantity(value: object) -> int | Fraction:
    """The exact value of a quantity given as a string or a JSON number; QuantityError if unusable.

    Whole values come back as `int` (cheap to compare on the hot path), others as an exact `Fraction`.
    """
    if type(value) is str:  # the common case, first
        parsed = _TEXT_VALUES[value] if len(value) <= MAX_TEXT else _parse_text(value)
    elif isinstance(value, bool):  # bool is an int subclass; `true` is not a quantity
        raise QuantityError("is not a quantity (true/false)")
    elif isinstance(value, int):
        if abs(value) > INT64_MAX:
            raise QuantityError("is too large (past int64)")
        return value
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError("is not a finite number")
        parsed = _parse_text(repr(value))  # the shortest text that round-trips, e.g. 0.5 -> "0.5"
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise QuantityError("is not a finite number")
        parsed = _parse_text(str(value))
    elif isinstance(value, str):  # a str subclass
        parsed = _parse_text(str(value))
    else:
        raise QuantityError(f"is not a quantity (expected a string or number, got {type(value).__name__})")
    if isinstance(parsed, str):
        raise QuantityError(parsed)
    return parsed


def quantity_or_none(value: object) -> int | Fraction | None:
    """`parse_quantity`, with None for anything that is not a usable quantity (mutation leaves those alone)."""
    if type(value) is str and len(value) <= MAX_TEXT:
        parsed = _TEXT_VALUES[value]
        return None if isinstance(parsed, str) else parsed
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _parse_text(text: str) -> int | Fraction | str:
    """The value of a quantity's text, or the reason it is not one (a message, for QuantityError)."""
    if len(text) > MAX_TEXT:
        return f"is not a quantity (longer than {MAX_TEXT} characters)"
    match = _PATTERN.fullmatch(text.strip(_GO_SPACE))
    if match is None:
        return "is not a Kubernetes quantity (expected e.g. 1, 2, 500m, 1e3, 2Ki)"
    number = Fraction(match["number"] + ("0" if match["number"].endswith(".") else ""))
    suffix, exponent = match["suffix"], match["exponent"]
    if suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix:
        number *= Fraction(10) ** _DECIMAL[suffix]
    elif exponent is not None:
        power = int(exponent)
        # At most MAX_TEXT digits either side of the point: past this bound the value is beyond int64
        # (power > 0) or below 10**-MAX_EXPONENT (power < 0) whatever they are, so no big power is computed.
        if number == 0:
            pass
        elif power > MAX_EXPONENT + MAX_TEXT:
            return "is too large (past int64)"
        elif power < -(MAX_EXPONENT + MAX_TEXT):
            number = Fraction(1, 10**MAX_EXPONENT)
        else:
            number *= Fraction(10) ** power
    if (number * NANO).denominator != 1:  # finer than 1n: up to the next 1n
        number = Fraction(-(-number.numerator * NANO // number.denominator), NANO)
    if match["sign"] == "-":
        number = -number
    if abs(number) > INT64_MAX:
        return "is too large (past int64)"
    return number.numerator if number.denominator == 1 else number


# Quantity texts repeat in nearly every review ("1", "500m"): memoized, as values or reasons.
_TEXT_VALUES = BoundedMemo(_parse_text)


PLACES = 4  # the decimal places format_fraction writes by default (env values and messages)


def whole_to_the_api_server(value: int | Fraction) -> bool:
    """Whether the API server's own validation takes `value` as a whole number of devices. It checks an extended
    resource's milli-units, rounded up (validation's `MilliValue() % 1000`; MilliValue is ScaledValue(-3), a
    ceiling), so a value within a thousandth below a whole number (`0.9999999`, `1999999999n`) passes it."""
    return math.ceil(value * 1000) % 1000 == 0


def format_fraction(value: int | Fraction, places: int = PLACES) -> str:
    """A decimal for env vars and messages, rounded down so a limit is never exceeded: 1/3 -> "0.3333"."""
    scaled = value.numerator * 10**places // value.denominator
    whole, frac = divmod(scaled, 10**places)
    text = f"{whole}.{frac:0{places}d}".rstrip("0").rstrip(".")
    return text or "0"


def exact_text(value: Fraction) -> str:
    """A share for people: 0.25 for 1/4, and 1/3 stays 1/3 (exact, like the policy)."""
    denominator = value.denominator
    for factor in (2, 5):
        while denominator % factor == 0:
            denominator //= factor
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    return format((Decimal(value.numerator) / Decimal(value.denominator)).normalize(), "f")
