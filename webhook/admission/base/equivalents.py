"""GPU-equivalents, the unit of a namespace's GPU budget (docs/budgets.md), written for people: exact decimals
where they exist, fractions where they do not (a 1g.10gb slice of an A100-80GB is 1/7 of a GPU)."""

from __future__ import annotations

from fractions import Fraction

_DECIMAL_PLACES = 9  # a quantity is exact to 1n: any exact decimal of the unit fits in this many places


def format_gpus(value: Fraction | int) -> str:
    """GPU-equivalents for people: a decimal where exact ("0.25", "3"), else the fraction ("1/7", "8/7")."""
    value = Fraction(value)
    scaled = value * 10**_DECIMAL_PLACES
    if scaled.denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    whole, rest = divmod(abs(scaled.numerator), 10**_DECIMAL_PLACES)
    text = f"{whole}.{rest:0{_DECIMAL_PLACES}d}".rstrip("0").rstrip(".")
    return ("-" if value < 0 else "") + text


def gpus_word(value: Fraction) -> str:
    """`1 GPU`, `0.5 GPU`, `2 GPUs`: the unit as people say it."""
    return f"{format_gpus(value)} GPU{'s' if value > 1 else ''}"
