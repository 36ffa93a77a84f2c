"""What the YAML readers share: the parser to read events with, and a second one for when the first gives up.

libyaml (PyYAML's C parser) is ten times faster than PyYAML's own, but from 0.2.6 on it refuses nesting past
1,000 levels in its scanner, which reads up to 1,024 characters ahead of the events a reader has seen. On such a
text its refusal (in its own words, which change between releases) would come before the reader's own limit and
message. `reader_for_retry` says when to read the text again with the pure-Python parser, which has no limit of
its own, so that the reader's limit decides and its message is the one shown.
"""

from __future__ import annotations

import yaml

FAST_PARSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
PURE_PARSER = yaml.SafeLoader
LIBYAML_NESTING = 1_000  # the least nesting libyaml refuses (its default limit)


def may_nest_deeper_than(text: str, depth: int) -> bool:
    """A cheap bound: each level takes a character; a flow collection opens with `[` or `{`; and block
    collections nest by indentation, at most two a column (a sequence may sit at its key's column)."""
    if len(text) <= depth:
        return False
    flow = text.count("[") + text.count("{")
    widest = max(map(len, text.splitlines()), default=0)
    return flow + 2 * (widest + 1) > depth


def reader_for_retry(parser: type, text: str) -> type | None:
    """The parser to read `text` again with after `parser` raised a YAML error, or None to report that error.

    Only the fast parser is retried, and only on a text that could nest as deep as libyaml refuses: a syntax
    error elsewhere is reported as found, without a second (slower) read.
    """
    if parser is PURE_PARSER or not may_nest_deeper_than(text, LIBYAML_NESTING):
        return None
    return PURE_PARSER
