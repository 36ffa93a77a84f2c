"""Reading manifests for `check`: files, directories and stdin; multi-document YAML, JSON and `kind: List`.

Parsing follows what `kubectl apply -f` accepts, so a file that works there works here. Every problem is a
`ManifestError` naming the file, the document and the YAML line, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml import events

from webhook.admission.policy.loader import API_VERSION, KIND
from webhook.admission.policy.yamltext import may_nest_deeper_than, reader_for_retry
from webhook.cli import goyaml

STDIN = "-"
POLICY_GROUP, POLICY_KIND = API_VERSION.split("/")[0], KIND  # a GPUPolicy document, as the loader reads it
STDIN_LABEL = "<stdin>"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    """One document of a YAML stream (or a whole JSON file)."""

    source: str  # the path as given, or "<stdin>"
    index: int  # position in the stream, counting from 0, empty documents included
    content: Any  # what the document parsed to: a mapping for a Kubernetes object

    @property
    def label(self) -> str:
        return f"{self.source}#{self.index}"

    @property
    def is_list(self) -> bool:
        return is_list_object(self.content)


@dataclass(frozen=True, slots=True)
class Item:
    """One Kubernetes object to evaluate: a document, or one entry of a `kind: List`'s `items`."""

    document: Document
    item: int | None  # the index in `items`, or None for a document that is the object itself
    obj: dict[str, Any]

    @property
    def label(self) -> str:
        suffix = f" items[{self.item}]" if self.item is not None else ""
        return self.document.label + suffix

    @property
    def is_policy(self) -> bool:
        """A gpu-admission policy (kind GPUPolicy in the gpu-admission.io group): what `--policies` reads, never
        an object the API server sends the webhook, so `check` does not judge it as one."""
        api_version = self.obj.get("apiVersion")
        return (
            self.obj.get("kind") == POLICY_KIND
            and isinstance(api_version, str)
            and api_version.startswith(POLICY_GROUP + "/")
        )

    def policy_note(self, policy_directory: str | None) -> str:
        """The one line `check` prints for a policy among the manifests it was given: whether it is one of the
        policies this run applies (a file directly in `policy_directory`), or one it does not."""
        metadata = self.obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        where = f"{self.label} {POLICY_KIND}/{name if isinstance(name, str) and name else '?'}"
        source = self.document.source
        if policy_directory and source != STDIN_LABEL and _same_directory(Path(source).parent, policy_directory):
            return f"SKIP {where}: a policy (read from --policies {policy_directory}), not a workload"
        return f"SKIP {where}: a gpu-admission policy, not a workload; to apply it, give its directory to --policies"


def _same_directory(a: Path, b: str) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


class ManifestError(Exception):
    """Input that cannot be read as Kubernetes objects; `str()` is one line for people."""

    def __init__(self, source: str, message: str, *, document: int | None = None, line: int | None = None):
        self.source = source
        self.message = message
        self.document = document
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source if self.document is None else f"{self.source}#{self.document}"
        if self.line is not None:
            where += f" line {self.line}"
        return f"{where}: {self.message}"


def is_list_object(content: Any) -> bool:
    """`kind: List` (kubectl's) or `kind: PodList` and friends (the API's), holding `items`."""
    return (
        isinstance(content, dict)
        and isinstance(content.get("kind"), str)
        and content["kind"].endswith("List")
        and isinstance(content.get("items"), list)
    )


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files as given; directories searched recursively, in sorted order, hidden ones skipped."""
    expanded: list[str] = []
    for path in paths:
        if path == STDIN:
            expanded.append(path)
            continue
        p = Path(path)
        if p.is_dir():
            found = sorted(_walk(p))
            if not found:
                raise ManifestError(path, "no *.yaml, *.yml or *.json files in this directory")
            expanded.extend(str(f) for f in found)
        elif p.exists():
            expanded.append(path)
        else:
            raise ManifestError(path, "no such file or directory")
    return expanded


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.endswith(MANIFEST_SUFFIXES) and not name.startswith("."):
                yield Path(dirpath) / name


def read_documents(path: str) -> list[Document]:
    """All documents of one file (`-` reads stdin); raises ManifestError at the first unreadable one."""
    source = STDIN_LABEL if path == STDIN else path
    try:
        raw = sys.stdin.buffer.read() if path == STDIN else Path(path).read_bytes()
    except OSError as exc:
        raise ManifestError(source, exc.strerror or str(exc)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(source, f"not UTF-8 text (byte {exc.start}): is this a manifest?") from None
    if path.endswith(".json"):
        return _parse_json(source, text)
    return _parse_yaml(source, text)


def _parse_json(source: str, text: str) -> list[Document]:
    """A JSON file: one object, or several one after another (a stream, as kubectl reads it)."""
    documents: list[Document] = []
    decoder = json.JSONDecoder()
    at = _skip_space(text, 0)
    while at < len(text) or not documents:
        try:
            content, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise ManifestError(
                source, f"invalid JSON: {exc.msg} (column {exc.colno})", document=len(documents), line=exc.lineno
            ) from None
        except RecursionError:
            raise ManifestError(source, NESTED_TOO_DEEPLY, document=len(documents)) from None
        documents.append(Document(source, len(documents), _as_sent(content, source, len(documents))))
        at = _skip_space(text, at)
    return documents


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


# Before PyYAML builds a document (recursively, in C: tens of thousands of levels crash the process), a text
# that could nest deeply or holds aliases has its events read flat and measured: how deep it nests, and how
# many values its aliases expand to (a "billion laughs" of 1 KB expands to 10**9; kubectl refuses it too, as
# "excessive aliasing"). The depth limit sits below libyaml's own (1,000 levels) and Python's ~1,000 frames, and
# far above any real object (a CRD's schema nests a few dozen levels), so the message is always this one.
MAX_DEPTH = 500
MAX_VALUES = 1_000_000  # per document, aliases expanded: a 3 MiB object holds a few hundred thousand
NESTED_TOO_DEEPLY = "nested too deeply to be a Kubernetes object"


def _check_shape(source: str, text: str, parser_class: type = goyaml.Loader) -> None:
    """ManifestError for a document nested deeper than MAX_DEPTH or holding more than MAX_VALUES values.

    Syntax errors end the scan quietly: loading the documents reports them, with their line. Where libyaml
    gives up on a text that may nest past its own limit, the text is measured again without it (yamltext.py).
    """
    if "*" not in text and not may_nest_deeper_than(text, MAX_DEPTH):
        return  # no alias, and not deep: nothing to measure (most manifests)
    parser = parser_class(text)
    document = -1
    stack: list[list[Any]] = []  # per open collection, the document's at the bottom: [values, anchor]
    sizes: dict[str, int] = {}  # anchor -> the values it stands for
    try:
        while not isinstance(event := parser.get_event(), events.StreamEndEvent):
            kind = type(event)
            if kind is events.DocumentStartEvent:
                document, stack, sizes = document + 1, [[0, None]], {}
                continue
            if kind is events.ScalarEvent:
                stack[-1][0] += 1
                if event.anchor:
                    sizes[event.anchor] = 1
                continue
            if kind is events.MappingStartEvent or kind is events.SequenceStartEvent:
                if len(stack) > MAX_DEPTH:
                    line = event.start_mark.line + 1
                    message = f"{NESTED_TOO_DEEPLY} (deeper than {MAX_DEPTH} levels at line {line})"
                    raise ManifestError(source, message, document=document)
                stack.append([1, event.anchor])
                continue
            if kind is events.AliasEvent:
                added = sizes.get(event.anchor, 1)
            elif kind is events.MappingEndEvent or kind is events.SequenceEndEvent:
                added, anchor = stack.pop()
                if anchor:
                    sizes[anchor] = added
            else:
                continue
            stack[-1][0] += added
            if stack[-1][0] > MAX_VALUES:
                raise ManifestError(
                    source,
                    f"YAML aliases expand to more than {MAX_VALUES:,} values (line {event.start_mark.line + 1}): "
                    "kubectl refuses such excessive aliasing too; write the values out",
                    document=document,
                )
    except yaml.YAMLError:
        retry = reader_for_retry(parser_class, text)
        if retry is not None:
            _check_shape(source, text, retry)
    finally:
        parser.dispose()


def _parse_yaml(source: str, text: str) -> list[Document]:
    _check_shape(source, text)
    documents: list[Document] = []
    try:
        for content in yaml.load_all(text, Loader=goyaml.Loader):
            documents.append(Document(source, len(documents), _as_sent(content, source, len(documents))))
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        message = exc.problem or "invalid YAML"
        if exc.context:
            at = f" at line {exc.context_mark.line + 1}" if exc.context_mark is not None else ""
            message += f" ({exc.context}{at})"
        raise ManifestError(source, message, document=len(documents), line=line) from None
    except yaml.YAMLError as exc:
        raise ManifestError(source, f"invalid YAML: {exc}", document=len(documents)) from None
    return documents


class _NotJSON(Exception):
    """A value that JSON cannot carry; the path to it is collected on the way out of the recursion."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.path: list[str] = []

    def where(self) -> str:
        return "".join(reversed(self.path)).lstrip(".") or "the document"


def _as_sent(content: Any, source: str, document: int) -> Any:
    """`content` as the API server would receive it: kubectl turns YAML into JSON first (sigs.k8s.io/yaml).

    Number and boolean keys become strings (`5: 1` is `"5": 1`); what JSON has no form for (a null key,
    `!!binary`, `!!set`, `.inf`, `.nan`, a float key) is a ManifestError naming where it is, as kubectl
    refuses it too. So the engine, the outputs and `--server` see what the webhook would.
    """
    try:
        return _jsonable(content)
    except _NotJSON as exc:
        raise ManifestError(source, f"{exc.where()}: {exc.problem}", document=document) from None
    except RecursionError:
        raise ManifestError(source, NESTED_TOO_DEEPLY, document=document) from None


def _jsonable(value: Any) -> Any:
    if type(value) is str or value is None or type(value) is int or type(value) is bool:
        return value
    if type(value) is dict:
        converted = {}
        for key, item in value.items():
            name = _key_text(key)
            try:
                converted[name] = _jsonable(item)
            except _NotJSON as exc:
                exc.path.append(f".{name}")
                raise
        return converted
    if type(value) is list:
        items = []
        for index, item in enumerate(value):
            try:
                items.append(_jsonable(item))
            except _NotJSON as exc:
                exc.path.append(f"[{index}]")
                raise
        return items
    if type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _NotJSON(f"{value} is not a number JSON can carry (Kubernetes objects are JSON): quote it")
        return value
    if isinstance(value, bytes):
        raise _NotJSON("binary data (!!binary) has no JSON form (Kubernetes objects are JSON): write it as base64 text")
    raise _NotJSON(f"a {type(value).__name__} has no JSON form (Kubernetes objects are JSON): write a map or a list")


def _key_text(key: Any) -> str:
    """A mapping key as sigs.k8s.io/yaml writes it into JSON: strings as they are, numbers and booleans as text."""
    if type(key) is str:
        return key
    if type(key) is bool:
        return "true" if key else "false"
    if type(key) is int:
        return str(key)
    shown = "null" if key is None else f"a {type(key).__name__} ({str(key)[:20]})"
    raise _NotJSON(f"the key {shown} has no JSON form (Kubernetes objects are JSON): quote it")


def items_of(document: Document) -> list[Item]:
    """The objects a document holds: none when empty, each of `items` for a List, else the document itself.

    A document that is not a mapping (a bare string or list) cannot be a Kubernetes object: an error. A
    mapping is the engine's to judge; one with no pod spec (a ConfigMap, a kustomization.yaml) comes back
    skipped.
    """
    content = document.content
    if content is None:
        return []
    if document.is_list:
        items = []
        for i, entry in enumerate(content["items"]):
            if not isinstance(entry, dict):
                raise ManifestError(
                    document.source,
                    f"items[{i}] is a {_type_name(entry)}, not a Kubernetes object (a mapping with a kind)",
                    document=document.index,
                )
            items.append(Item(document, i, entry))
        return items
    if not isinstance(content, dict):
        raise ManifestError(
            document.source,
            f"the document is a {_type_name(content)}, not a Kubernetes object (a mapping with a kind)",
            document=document.index,
        )
    return [Item(document, None, content)]


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def load_items(paths: Sequence[str]) -> tuple[list[Document], list[Item], list[ManifestError]]:
    """Every document and object under `paths`, with every file's error (one per file) collected."""
    documents: list[Document] = []
    items: list[Item] = []
    errors: list[ManifestError] = []
    files: list[str] = []
    for path in paths:
        try:
            files.extend(expand_paths([path]))
        except ManifestError as exc:
            errors.append(exc)
    for path in files:
        try:
            file_documents = read_documents(path)
            file_items = [item for document in file_documents for item in items_of(document)]
        except ManifestError as exc:
            errors.append(exc)
            continue
        documents.extend(file_documents)
        items.extend(file_items)
    return documents, items, errors
