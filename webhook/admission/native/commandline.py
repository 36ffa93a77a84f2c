"""The inference engine a container `c` runs, told from its command line as engines.detect tells it, in CEL.

Everything is written from engines.py's own tables (its leads, pythons, modules, image entrypoints, trtllm-serve's
other commands): a container whose command is empty and whose image's repository is an image entrypoint runs
that image's engine; else `vllm serve`, `trtllm-serve` (not one of its other commands), or a python (`python`,
`python3`, `python3.11`) whose first argument that is no option is `-m` followed by a server's module. A command
word is read by its last path part (`/usr/bin/python3`), as the webhook reads it, with a regular expression
(RE2 in the API server: `[^/]` takes a newline too, and `$` is the end of the text).

The CEL is exact for a container whose `command` and `args` are absent or lists of strings and whose `image` is
absent or a string: scope.py leaves any other to the webhook (`well_formed`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.admission.native.cel import bind, lit, strings
from webhook.admission.phases import engines

NONE = "''"  # the CEL name of no engine
ARGV = "(has(c.command) ? c.command : []) + (has(c.args) ? c.args : [])"
MODULE_OPTION = "-m"  # python's option that runs a module


def _pattern(text: str) -> str:
    """`text` as a regular expression that matches it alone (each sign in a class of its own)."""
    assert all(ch.isalnum() or ch in "-._" for ch in text), text
    return "".join(ch if ch.isalnum() else f"[{ch}]" for ch in text)


def _last_part(names: Iterable[str], prefixes: Iterable[str] = ()) -> str:
    """CEL of a command word `v[0]`: its last path part is one of `names`, or starts with one of `prefixes` (read
    with a regular expression only where the word holds the prefix: a regular expression costs more)."""
    terms = [f"v[0] == {lit(name)} || v[0].endsWith({lit('/' + name)})" for name in sorted(names)]
    for prefix in prefixes:
        pattern = lit(f"^([^/]*/)*{_pattern(prefix)}[^/]*$")
        terms.append(f"v[0].contains({lit(prefix)}) && v[0].matches({pattern})")
    return " || ".join(f"({term})" for term in terms)


def _repository(name: str) -> str:
    """A CEL regex literal: an image whose repository (engines._image_repository) is `name`."""
    return lit(f"^([^@]*/)?{_pattern(name)}(:[^/@]*)?(@[\\s\\S]*)?$")


def _python_module() -> str:
    """The engine of a python command line `v` (its first word a python): its first argument that is no option
    is `-m` (the first `-m`, then), followed by a server's module; else none."""
    modules = "{" + ", ".join(f"{lit(module)}: {lit(e.name)}" for module, e in engines.MODULES.items()) + "}"
    option = lit(MODULE_OPTION)
    stops = f"v.filter(t, t == {option} || !t.startsWith('-'))"  # the first word among them, unless an option
    place = "(v[0].startsWith('-') ? 0 : 1)"  # of the first word after the python among them
    first_stop = bind(stops, "s", f"s.size() > {place} && s[{place}] == {option}")
    runs = bind(
        f"v.indexOf({option})",
        "i",
        f"i + 1 < v.size() && v[i + 1] in {modules} ? {modules}[v[i + 1]] : {NONE}",
    )
    return f"{first_stop} ? ({runs}) : {NONE}"


def engine_of() -> str:
    """CEL of `c`: the name of the engine it runs (engines.Engine.name), '' for none."""
    no_command = "(!has(c.command) || size(c.command) == 0)"
    chosen = bind(
        ARGV,
        "v",
        f"v.size() == 0 ? {NONE} : "
        f"({_last_part([engines.VLLM_COMMAND])}) ? "
        f"(v.size() > 1 && v[1] == {lit(engines.VLLM_SUBCOMMAND)} ? {lit(engines.VLLM.name)} : {NONE}) : "
        f"({_last_part([engines.TRTLLM_COMMAND])}) ? "
        f"(v.size() == 1 || !(v[1] in {strings(sorted(engines.TRTLLM_OTHER_COMMANDS))}) ? "
        f"{lit(engines.TRTLLM.name)} : {NONE}) : "
        f"({_last_part(engines.PYTHONS, [engines.PYTHON_VERSIONED])}) ? ({_python_module()}) : {NONE}",
    )
    for image, engine in reversed(engines.IMAGE_ENTRYPOINTS.items()):
        entrypoint = (
            f"{no_command} && has(c.image) && c.image.contains({lit(image)}) && c.image.matches({_repository(image)})"
        )
        chosen = f"{entrypoint} ? {lit(engine.name)} : ({chosen})"
    return chosen


def runs_engine() -> str:
    """CEL of `c`: it runs an inference engine (engines.detect finds one)."""
    return f"({engine_of()}) != {NONE}"


def well_formed(body: dict[str, Any]) -> bool:
    """The container's command line and image are what the CEL reads exactly: absent, or lists of strings and a
    string."""
    for key in ("command", "args"):
        if key in body and (type(body[key]) is not list or not all(type(item) is str for item in body[key])):
            return False
    return "image" not in body or type(body["image"]) is str
