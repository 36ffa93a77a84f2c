"""YAML scalars as kubectl reads them (go-yaml v2 through sigs.k8s.io/yaml), read and written by `check`.

The expected values are go-yaml v2's resolve.go applied by hand: what `kubectl apply -f` would send.
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.cli import goyaml


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # booleans: YAML 1.1's single letters too
        ("y", True), ("Y", True), ("yes", True), ("On", True), ("TRUE", True),
        ("n", False), ("N", False), ("no", False), ("OFF", False), ("false", False),
        # null
        ("~", None), ("null", None), ("NULL", None), ("", None),
        # ints: strconv.ParseInt(s, 0, 64) with the underscores removed
        ("1", 1), ("+1", 1), ("-1", -1), ("1_000", 1000), ("017", 15), ("0o17", 15), ("0O17", 15),
        ("0x1F", 31), ("-0b11", -3), ("9223372036854775807", 2**63 - 1), ("18446744073709551615", 2**64 - 1),
        # floats: yamlStyleFloat, and ParseFloat for text starting with "."
        ("1e3", 1000.0), ("1E3", 1000.0), ("-1e-5", -1e-5), ("+1e3", 1000.0), ("1e+3", 1000.0), ("08", 8.0),
        ("09", 9.0), ("0e0", 0.0), ("+.5", 0.5), ("440e0", 440.0), (".5", 0.5), ("1.", 1.0),
        ("-18446744073709551616", -(2.0**64)),  # past int64, and signed: not a uint64 either
        # strings: what go-yaml keeps as text, unlike PyYAML
        ("12:30:00", "12:30:00"), ("1:20", "1:20"), ("=", "="), ("2024-01-01", "2024-01-01"), ("1e400", "1e400"),
        ("0x", "0x"), ("._5", "._5"), ("1.2.3", "1.2.3"), ("+", "+"), ("-x", "-x"), ("500m", "500m"), ("1Gi", "1Gi"),
        ("0b2", "0b2"), ("yes!", "yes!"), ("0x1p-2", "0x1p-2"), ("Infinity", "Infinity"),
    ],
)  # fmt: skip
def test_plain_scalars_read_as_go_yaml_reads_them(text, value):
    got = goyaml.go_scalar(text)
    assert (type(got), got) == (type(value), value)
    loaded = yaml.load(f"v: {text}\n" if text else "v:\n", Loader=goyaml.Loader)["v"]
    assert (type(loaded), loaded) == (type(value), value)


def test_special_floats():
    assert goyaml.go_scalar(".inf") == math.inf and goyaml.go_scalar("-.Inf") == -math.inf
    assert math.isnan(goyaml.go_scalar(".NaN"))


def test_quoted_scalars_and_explicit_tags_keep_their_type():
    assert yaml.load('a: "y"\nb: \'1e3\'\nc: !!str 08\nd: !!int "5"\n', Loader=goyaml.Loader) == {
        "a": "y", "b": "1e3", "c": "08", "d": 5,
    }  # fmt: skip


NEAR_SCALARS = st.text(alphabet="0123456789+-._eExXoObByYnN:= ~", max_size=8)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(NEAR_SCALARS, NEAR_SCALARS | st.text(max_size=6), max_size=4))
def test_every_string_written_is_read_back_as_the_same_string(mapping):
    # A Helm post-renderer's output must mean what its input meant: kubectl reads it with go-yaml's rules.
    text = yaml.dump(mapping, Dumper=goyaml.Dumper, allow_unicode=True)
    assert yaml.load(text, Loader=goyaml.Loader) == mapping
