"""A policy file's YAML as plain values, read event by event and refusing what a policy file never needs:
aliases (the "billion laughs" bomb), nesting past `MAX_DEPTH`, more than `MAX_EVENTS` values, tags other than
YAML's own. Each problem found while reading is kept with its field path, so the loader reports it once, where
it stands. libyaml reads first; yamltext.py says when to read again without it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from yaml import events
from yaml.constructor import SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from webhook.admission.base.violation import cut
from webhook.admission.policy.globs import quote
from webhook.admission.policy.yamltext import FAST_PARSER, reader_for_retry

MAX_DEPTH = 16  # a policy document nests 4 levels deep
MAX_EVENTS = 50_000  # YAML events per file (values, collections, documents): ample, and read in well under 1 s

TAG = "tag:yaml.org,2002:"
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_./-]+")
# The texts (underscores removed) that a scalar tagged !!int or !!float may hold: YAML 1.1's forms, ASCII only.
# PyYAML's constructors raise on others (`!!int abc`, and even an untagged `0x_`), or read them loosely.
_INT_TEXT = re.compile(r"[-+]?(?:0b[01]+|0x[0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*(?::[0-9]+)*)")
_FLOAT_TEXT = re.compile(
    r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+(?::[0-5]?[0-9])+\.?[0-9]*"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)


@dataclass(frozen=True, slots=True)
class Scalar:
    """A YAML scalar that is not a string, whole number, boolean or null (a decimal, a date...): its text."""

    tag: str
    text: str


@dataclass(frozen=True, slots=True)
class Invalid:
    """A scalar that its YAML tag cannot hold (`!!int abc`, `!!bool maybe`), reported where it stands while
    reading; validation then stays silent about it rather than describe it a second time."""

    message: str


class _Refused(Exception):
    """The document cannot be read further (syntax error, alias, nesting): its message says why."""


@dataclass
class _Container:
    value: dict[str, Any] | list[Any]
    path: str
    key: Any = None  # a mapping's pending key (any value YAML reads); _NO_KEY while a key is expected
    skip: bool = False  # the pending key was bad: drop its value


class _Pending(enum.Enum):
    """What a mapping holds between its values: no key yet (None is a key YAML can read)."""

    NO_KEY = "no key"


_NO_KEY: Final = _Pending.NO_KEY
_NOT_UNICODE = "not valid Unicode text (a lone surrogate?); save the file as UTF-8"
_RESOLVER = Resolver()
_CONSTRUCTOR = SafeConstructor()
_COLLECTION_TAGS = (None, "!", TAG + "map", TAG + "seq")
_SCALAR_TAGS = {TAG + name for name in ("int", "float", "timestamp", "binary")}  # kept as text


@dataclass
class Document:
    value: Any
    problems: list[tuple[str, str]] = field(default_factory=list)  # (field path, message)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def join_path(path: str, key: str) -> str:
    """`path.key`; a key that is not plain (letters, digits, `_ - . /`) is quoted, so a problem stays one line."""
    key = shorten(key) if _PLAIN_KEY.fullmatch(key) else quote_value(key)
    return f"{path}.{key}" if path else key


def _child_path(container: _Container) -> str:
    if isinstance(container.value, list):
        return f"{container.path}[{len(container.value)}]"
    if container.key is _NO_KEY or isinstance(container.key, Invalid):
        return container.path
    return join_path(container.path, str(container.key))


def _scalar(event: events.ScalarEvent) -> Any:
    """The scalar's value; Invalid where its tag cannot hold its text (PyYAML's constructors would raise)."""
    tag = explicit = event.tag
    text = event.value
    if tag is None or tag == "!":
        resolved = _RESOLVER.resolve(ScalarNode, text, event.implicit)  # type: ignore[no-untyped-call]  # unannotated in types-PyYAML
        tag, explicit = resolved, None
    if tag in (TAG + "str", TAG + "merge"):  # "<<" (a merge needs an alias anyway): an unknown field
        return text
    if tag == TAG + "null":
        return None
    if tag == TAG + "bool":
        value = SafeConstructor.bool_values.get(text.lower())
        return _invalid(event, "is not a boolean; write true or false") if value is None else value
    if tag == TAG + "int":
        if not _INT_TEXT.fullmatch(text.replace("_", "")):
            if explicit is None:  # "0x_": YAML 1.1 reads a 0x or 0b prefix as a number even without digits
                why = "is not a whole number (a 0x or 0b prefix needs digits); write one (e.g. 4) or quote it"
            else:
                why = "is not a whole number; write one (e.g. 4) or remove the tag"
            return _invalid(event, why)
        if len(text) <= 32:  # longer: refused by range checks, kept as text
            return _CONSTRUCTOR.construct_yaml_int(ScalarNode(tag, text))
    if tag == TAG + "float" and not _FLOAT_TEXT.fullmatch(text.replace("_", "")):
        return _invalid(event, "is not a number; write one (e.g. 0.25) or remove the tag")
    if tag in _SCALAR_TAGS:
        return Scalar(tag, text)
    raise _Refused(f"unsupported YAML tag {tag} at {_where(event.start_mark)}; remove the tag")


def _invalid(event: events.ScalarEvent, why: str) -> Invalid:
    """`!!int "abc" at line 3, column 8 <why>`: the tag as written (short form), the text quoted."""
    tag = event.tag
    shown = quote_value(event.value)
    if tag is not None and tag != "!":
        shown = f"{'!!' + tag.removeprefix(TAG) if tag.startswith(TAG) else tag} {shown}"
    return Invalid(f"{shown} at {_where(event.start_mark)} {why}")


def read_documents(text: str, parser_class: type = FAST_PARSER) -> tuple[list[Document], str | None]:
    """The documents of `text` (None for empty ones), and why reading stopped early, if it did.

    libyaml (about ten times faster than pure Python on a hostile 1 MiB file) reads first; where it gives up on
    a text that may nest past its own limit, the text is read again without it (yamltext.py), so that this
    module's limit and message decide.
    """
    documents: list[Document] = []
    try:
        parser = parser_class(text)
    except UnicodeError:
        return documents, _NOT_UNICODE
    stack: list[_Container] = []
    current = Document(None)

    def add(value: Any) -> None:
        if isinstance(value, Invalid):  # reported here, with its path; validation does not describe it again
            current.problems.append((_child_path(stack[-1]) if stack else "", value.message))
        if not stack:
            current.value = value
            return
        top = stack[-1]
        if isinstance(top.value, list):
            top.value.append(value)
        elif top.key is _NO_KEY:
            top.skip = not isinstance(value, str)
            if top.skip and not isinstance(value, Invalid):
                current.problems.append((top.path, f"keys must be strings, got {describe(value)}"))
            elif value in top.value:
                current.problems.append((join_path(top.path, value), "duplicate key; remove one of them"))
            top.key = value
        else:
            if not top.skip:
                top.value[top.key] = value
            top.key, top.skip = _NO_KEY, False

    try:
        try:
            for count in range(MAX_EVENTS + 1):
                event = parser.get_event()
                if isinstance(event, events.StreamEndEvent):
                    break
                if count == MAX_EVENTS:
                    raise _Refused(
                        f"has more than {MAX_EVENTS} YAML values (at {_where(event.start_mark)}); "
                        "policy files are small: split or trim it"
                    )
                if isinstance(event, events.DocumentStartEvent):
                    current = Document(None)
                elif isinstance(event, events.DocumentEndEvent):
                    documents.append(current)
                elif isinstance(event, events.AliasEvent):
                    raise _Refused(
                        f"YAML alias *{event.anchor} at {_where(event.start_mark)} is not allowed in policy "
                        "files (aliases can expand exponentially); write the value out"
                    )
                elif isinstance(event, events.ScalarEvent):
                    add(_scalar(event))
                elif isinstance(event, events.CollectionStartEvent):
                    if len(stack) >= MAX_DEPTH:
                        raise _Refused(
                            f"nesting deeper than {MAX_DEPTH} levels at {_where(event.start_mark)}; "
                            "a policy document nests 4 levels deep"
                        )
                    if event.tag not in _COLLECTION_TAGS:
                        where = _where(event.start_mark)
                        raise _Refused(f"unsupported YAML tag {event.tag} at {where}; remove the tag")
                    path = _child_path(stack[-1]) if stack else ""
                    if isinstance(event, events.MappingStartEvent):
                        stack.append(_Container({}, path, _NO_KEY))
                    else:
                        stack.append(_Container([], path))
                elif isinstance(event, events.CollectionEndEvent):
                    done = stack.pop()
                    add(done.value)
        finally:
            parser.dispose()
    except _Refused as exc:
        return documents, str(exc)
    except yaml.MarkedYAMLError as exc:
        retry = reader_for_retry(parser_class, text)
        if retry is not None:
            return read_documents(text, retry)
        mark = exc.problem_mark or exc.context_mark
        where = f" at {_where(mark)}" if mark is not None else ""
        context = f" ({exc.context})" if exc.context and exc.problem else ""
        return documents, f"invalid YAML{where}: {exc.problem or exc.context}{context}"
    except yaml.reader.ReaderError as exc:  # a character YAML forbids, e.g. NUL; libyaml counts bytes
        line = text.encode("utf-8", "replace")[: exc.position].count(b"\n") + 1
        return documents, f"invalid YAML at line {line}: {exc.reason} (character #x{exc.character:04x})"
    except yaml.YAMLError as exc:
        return documents, f"invalid YAML: {str(exc).splitlines()[0]}"
    except UnicodeError:
        return documents, _NOT_UNICODE
    return documents, None


# --- Values in messages, as the user wrote them -------------------------------------------------------------


def shorten(text: str, limit: int = 60) -> str:
    return cut(text, limit, "…")


def quote_value(value: str) -> str:
    """Shortened, quoted and escaped (`globs.quote`): a problem stays one line whatever the value holds."""
    return quote(shorten(value))


def describe(value: Any) -> str:
    """A value as the user wrote it, and what YAML made of it."""
    if value is None:
        return "an empty value (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean; YAML also reads yes/no/on/off as booleans)"
    if isinstance(value, int):
        return f"{value} (a whole number)"
    if isinstance(value, str):
        return f"{quote_value(value)} (a string)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, Invalid):  # already reported; the checker stays silent about it
        return "a value its YAML tag cannot hold"
    kind = {"float": "a decimal number", "int": "a whole number", "timestamp": "a date"}
    text = shorten(value.text, 30)
    if not text.isprintable():  # an explicitly tagged scalar holds any text (`!!binary "a\nb"`): keep one line
        text = quote_value(value.text)
    return f"{text} ({kind.get(value.tag.removeprefix(TAG), value.tag.removeprefix(TAG))})"
