"""Kueue's configuration types and its transformation rules, read from a Kueue source tree at test time.

`KUEUE_SOURCE` names a checkout of kubernetes-sigs/kueue. From it this module reads:
- the Go type declarations of `apis/config/<version>/` (structs with their `json:"…"` tags, named types and
  their string constants such as Retain and Replace), with a small Go lexer that honours comments, string
  literals and Go's automatic semicolons;
- the group and version the package registers `Configuration` under (`groupversion_info.go`);
- the default strategy (`defaults.go`) and the rules of `validateResourceTransformations` in
  `pkg/config/validation.go`, which the checks here implement; `transformation_rules` refuses a function
  that has grown a rule this module does not know, so a newer Kueue cannot pass unchecked.

`decode_errors` walks a rendered document as Kueue's strict decoder would (serializer.EnableStrict: an unknown
or duplicate field fails, names match case-sensitively), with the kinds of Go's encoding/json, quantities
through the project's resource.Quantity parser. It is stricter than Go in two plain ways: a null is refused
where Go would leave a scalar as it was, and a struct inside the rendering must carry each field Kueue
marshals always (no `omitempty`); the root is exempt, as a rendering is merged into a whole configuration.
Only Kubernetes types that the configuration uses and that are not in Kueue's tree are described here
(`EXTERNAL`); a rendered value of any other outside type fails as "cannot check".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from webhook.admission.base.quantity import QuantityError, parse_quantity

ENVIRONMENT = "KUEUE_SOURCE"


def source_tree() -> Path | None:
    """The Kueue checkout named by KUEUE_SOURCE, or None where unset."""
    value = os.environ.get(ENVIRONMENT, "").strip()
    return Path(value) if value else None


# --- a Go lexer -----------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r]+)
  | (?P<newline>\n)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<rune>'(?:[^'\\\n]|\\.)+')
  | (?P<number>0[xX][0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?(?:[pP][+-]?[0-9_]+)?i?|0[oObB][0-9_]+
              |[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9_]+)?i?|\.[0-9][0-9_]*(?:[eE][+-]?[0-9_]+)?i?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\.\.\.|<-|[-+*/%&|^<>=!:]=|&&|\|\||<<|>>|&\^|\+\+|--|[-+*/%&|^<>=!~.,;:(){}\[\]])
    """,
    re.VERBOSE | re.DOTALL,
)
# Go inserts a semicolon at a line's end after these (the spec's "Semicolons").
_ENDS_STATEMENT = {"ident", "number", "string", "raw", "rune"}
_ENDING_WORDS = {"break", "continue", "fallthrough", "return"}
_ENDING_OPS = {"++", "--", ")", "]", "}"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident, number, string, raw, rune, op
    text: str


def tokens(source: str) -> list[Token]:
    """Go source as tokens, comments dropped, the semicolons Go inserts made explicit."""
    found: list[Token] = []
    position = 0
    while position < len(source):
        match = _TOKEN.match(source, position)
        if match is None:
            raise ValueError(f"cannot read Go source at offset {position}: {source[position : position + 20]!r}")
        position = match.end()
        kind = match.lastgroup or ""
        text = match.group()
        line_ends = kind == "newline" or (kind == "block_comment" and "\n" in text)
        if line_ends or position == len(source):
            last = found[-1] if found else None
            if last is not None and (
                (last.kind in _ENDS_STATEMENT and last.text not in _GO_KEYWORDS)
                or last.text in _ENDING_WORDS
                or (last.kind == "op" and last.text in _ENDING_OPS)
            ):
                found.append(Token("op", ";"))
        if kind in ("space", "newline", "line_comment", "block_comment"):
            continue
        found.append(Token(kind, text))
    return found


_GO_KEYWORDS = {
    "chan", "const", "default", "defer", "else", "for", "func", "go", "goto", "if", "import", "interface", "map",
    "package", "range", "select", "struct", "switch", "type", "var", "case",
}  # fmt: skip


def go_string(token: Token) -> str:
    """The value of a Go string literal (interpreted or raw); enough escapes for identifiers and tags."""
    if token.kind == "raw":
        return token.text[1:-1].replace("\r", "")
    if token.kind != "string":
        raise ValueError(f"not a string literal: {token.text}")
    return bytes(token.text[1:-1], "utf-8").decode("unicode_escape")


# --- the type model -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Named:
    """A type by name: a builtin (`string`), one of the package (`Resources`), or qualified (`corev1.ResourceList`)."""

    name: str
    package: str = ""


@dataclass(frozen=True, slots=True)
class Pointer:
    elem: GoType


@dataclass(frozen=True, slots=True)
class Slice:
    elem: GoType


@dataclass(frozen=True, slots=True)
class Map:
    key: GoType
    elem: GoType


@dataclass(frozen=True, slots=True)
class Opaque:
    """A type this reader does not model (functions, channels, interfaces, arrays): nothing renders one."""

    text: str


@dataclass(frozen=True, slots=True)
class Field:
    go_name: str  # "" for an embedded field
    type: GoType
    json_name: str  # the key in JSON; "" for an embedded struct whose fields are promoted
    omitempty: bool
    skipped: bool  # json:"-" or unexported


@dataclass(frozen=True, slots=True)
class Struct:
    fields: tuple[Field, ...]


GoType = Named | Pointer | Slice | Map | Struct | Opaque


@dataclass(slots=True)
class Package:
    """The declarations of one Go package directory that matter to JSON."""

    directory: Path
    types: dict[str, GoType] = field(default_factory=dict)  # name -> underlying type expression
    constants: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (type name, string value)

    def enum(self, type_name: str) -> list[str]:
        """The string constants declared of a named type, in source order (Retain, Replace)."""
        return [value for typ, value in self.constants.values() if typ == type_name]


class _Parser:
    def __init__(self, toks: list[Token], origin: str) -> None:
        self.toks = toks
        self.at = 0
        self.origin = origin

    def peek(self, ahead: int = 0) -> Token:
        index = self.at + ahead
        return self.toks[index] if index < len(self.toks) else Token("eof", "")

    def take(self, text: str | None = None) -> Token:
        token = self.peek()
        if text is not None and token.text != text:
            raise ValueError(f"{self.origin}: expected {text!r}, found {token.text!r} (token {self.at})")
        self.at += 1
        return token

    def skip_balanced(self) -> None:
        """Past one token, or past a whole bracketed group when it opens one."""
        pairs = {"(": ")", "[": "]", "{": "}"}
        opener = self.take().text
        if opener not in pairs:
            return
        depth = 1
        while depth:
            text = self.take().text
            if text == "":
                raise ValueError(f"{self.origin}: unbalanced {opener}")
            if text in pairs:
                depth += 1
            elif text in pairs.values():
                depth -= 1

    def type_expr(self) -> GoType:
        token = self.peek()
        if token.text == "*":
            self.take()
            return Pointer(self.type_expr())
        if token.text == "[":
            self.take()
            if self.peek().text == "]":
                self.take()
                return Slice(self.type_expr())
            while self.peek().text != "]":
                self.skip_balanced()
            self.take("]")
            elem = self.type_expr()
            return Opaque(f"array of {elem}")
        if token.text == "map":
            self.take()
            self.take("[")
            key = self.type_expr()
            self.take("]")
            return Map(key, self.type_expr())
        if token.text == "struct":
            self.take()
            return self.struct_body()
        if token.text in ("func", "chan", "interface"):
            start = self.at
            self.take()
            while self.peek().text not in (";", ")", "}", "`", "") and self.peek().kind not in ("raw", "string"):
                self.skip_balanced()
            return Opaque(" ".join(t.text for t in self.toks[start : self.at]))
        if token.kind != "ident":
            raise ValueError(f"{self.origin}: expected a type, found {token.text!r}")
        self.take()
        if self.peek().text == "." and self.peek(1).kind == "ident":
            self.take()
            return Named(self.take().text, token.text)
        named = Named(token.text)
        if self.peek().text == "[":  # a generic instance: not modelled
            self.skip_balanced()
            return Opaque(f"{token.text}[...]")
        return named

    def struct_body(self) -> Struct:
        self.take("{")
        fields: list[Field] = []
        while self.peek().text != "}":
            if self.peek().text == ";":
                self.take()
                continue
            fields.extend(self.field_decl())
        self.take("}")
        return Struct(tuple(fields))

    def field_decl(self) -> list[Field]:
        names: list[str] = []
        embedded = False
        first, second = self.peek(), self.peek(1)
        if first.text == "*" or (first.kind == "ident" and (second.text in (".", ";", "}") or second.kind == "raw")):
            embedded = True  # `metav1.TypeMeta`, `*Foo`, `ControllerManager`, each with or without a tag
            typ = self.type_expr()
        else:
            names.append(self.take().text)
            while self.peek().text == ",":
                self.take()
                names.append(self.take().text)
            typ = self.type_expr()
        tag = ""
        if self.peek().kind in ("raw", "string"):
            tag = go_string(self.take())
        if self.peek().text == ";":
            self.take()
        json_name, options, has_tag = _json_tag(tag)
        if embedded:
            base = typ.elem if isinstance(typ, Pointer) else typ
            go_name = base.name if isinstance(base, Named) else ""
            exported = go_name[:1].isupper()
            if not has_tag or json_name == "":
                # encoding/json promotes an untagged (or name-less tagged) embedded struct's fields
                return [Field("", typ, "", "omitempty" in options, json_name == "-" or not exported)]
            return [Field(go_name, typ, json_name, "omitempty" in options, json_name == "-" or not exported)]
        return [
            Field(name, typ, json_name or name, "omitempty" in options, json_name == "-" or not name[:1].isupper())
            for name in names
        ]


def _json_tag(tag: str) -> tuple[str, set[str], bool]:
    """The name and options of a struct tag's json key (reflect.StructTag.Get's grammar)."""
    for match in re.finditer(r'([^\s:"]+):"((?:[^"\\]|\\.)*)"', tag):
        if match.group(1) == "json":
            name, *options = match.group(2).split(",")
            return name, set(options), True
    return "", set(), False


def parse_package(directory: Path) -> Package:
    """Every type and string constant declared in a package directory's non-test Go files."""
    package = Package(directory)
    aliases: dict[str, str] = {}  # const Default = Retain
    for path in sorted(directory.glob("*.go")):
        if path.name.endswith("_test.go"):
            continue
        parser = _Parser(tokens(path.read_text(encoding="utf-8")), str(path.name))
        while parser.peek().kind != "eof":
            word = parser.peek().text
            if word == "type":
                parser.take()
                for name, typ in _specs(parser, _type_spec):
                    package.types[name] = typ
            elif word == "const":
                parser.take()
                for name, (typ, value, alias) in _specs(parser, _const_spec):
                    if value is not None:
                        package.constants[name] = (typ, value)
                    elif alias:
                        aliases[name] = alias
            elif word == "func":
                parser.take()
                while parser.peek().text not in ("{", ";", ""):
                    parser.skip_balanced()
                if parser.peek().text == "{":
                    parser.skip_balanced()
            else:
                parser.skip_balanced()
    for name, target in aliases.items():
        if target in package.constants:
            package.constants[name] = ("", package.constants[target][1])  # a default, not one of the enum
    return package


def _specs(parser: _Parser, one: Any) -> list[Any]:
    """The specs of a `type` or `const` declaration, single or grouped in parentheses."""
    if parser.peek().text != "(":
        return [one(parser)]
    parser.take("(")
    found = []
    while parser.peek().text != ")":
        if parser.peek().text == ";":
            parser.take()
            continue
        found.append(one(parser))
    parser.take(")")
    return found


def _type_spec(parser: _Parser) -> tuple[str, GoType]:
    name = parser.take().text
    if parser.peek().text == "[" and parser.peek(1).kind == "ident" and parser.peek(2).text != "]":
        parser.skip_balanced()  # type parameters
        typ: GoType = Opaque(f"generic {name}")
        while parser.peek().text not in (";", ")"):
            parser.skip_balanced()
    else:
        if parser.peek().text == "=":
            parser.take()
        typ = parser.type_expr()
    if parser.peek().text == ";":
        parser.take()
    return name, typ


def _const_spec(parser: _Parser) -> tuple[str, tuple[str, str | None, str]]:
    """`Name [Type] = "value"` gives (type, value); `Name = Other` gives the alias; other forms neither."""
    name = parser.take().text
    typ = ""
    if parser.peek().kind == "ident" and parser.peek(1).text == "=":
        typ = parser.take().text
    value: str | None = None
    alias = ""
    if parser.peek().text == "=":
        parser.take()
        start = parser.at
        while parser.peek().text not in (";", ")", ""):
            parser.skip_balanced()
        expression = parser.toks[start : parser.at]
        if len(expression) == 1 and expression[0].kind in ("string", "raw"):
            value = go_string(expression[0])
        elif len(expression) == 1 and expression[0].kind == "ident":
            alias = expression[0].text
        elif (
            len(expression) == 4
            and expression[0].kind == "ident"
            and expression[1].text == "("
            and expression[2].kind in ("string", "raw")
        ):
            typ, value = expression[0].text, go_string(expression[2])  # Type("value")
    if parser.peek().text == ";":
        parser.take()
    return name, (typ, value, alias)


# --- the Kueue tree -------------------------------------------------------------------------------------------

_VERSION = re.compile(r"v([0-9]+)(?:(alpha|beta)([0-9]+))?")


def version_order(version: str) -> tuple[int, int, int]:
    """Kubernetes' version priority: v2 > v1 > v1beta2 > v1beta1 > v1alpha1."""
    match = _VERSION.fullmatch(version)
    if match is None:
        return (-1, -1, -1)
    stability = {"alpha": 0, "beta": 1, None: 2}[match.group(2)]
    return (int(match.group(1)), stability, int(match.group(3) or 0))


def config_versions(tree: Path) -> list[str]:
    """The versions of Kueue's configuration API in the tree, newest first."""
    found = [
        p.name
        for p in (tree / "apis" / "config").iterdir()
        if _VERSION.fullmatch(p.name) and (p / "configuration_types.go").is_file()
    ]
    return sorted(found, key=version_order, reverse=True)


@dataclass(frozen=True, slots=True)
class ConfigAPI:
    """One version of Kueue's configuration API as its package declares it."""

    version: str
    api_version: str  # "config.kueue.x-k8s.io/v1beta2"
    package: Package
    default_strategy: str  # what defaults.go sets where a transformation names none; "" if nothing


def config_api(tree: Path, version: str) -> ConfigAPI:
    directory = tree / "apis" / "config" / version
    package = parse_package(directory)
    info = (directory / "groupversion_info.go").read_text(encoding="utf-8")
    toks = tokens(info)
    group = found_version = ""
    for index, token in enumerate(toks):
        if token.text == "GroupVersion" and toks[index + 1].text == "{":
            body = toks[index + 2 : index + 10]
            for key, colon, value in zip(body, body[1:], body[2:], strict=False):
                if colon.text == ":" and value.kind == "string":
                    if key.text == "Group":
                        group = go_string(value)
                    elif key.text == "Version":
                        found_version = go_string(value)
            break
    if not group or found_version != version:
        raise ValueError(f"{directory}/groupversion_info.go: no GroupVersion for {version}")
    if "&Configuration{}" not in "".join(t.text for t in toks):
        raise ValueError(f"{directory}/groupversion_info.go: Configuration is not registered")
    default = package.constants.get("DefaultResourceTransformationStrategy", ("", ""))[1]
    return ConfigAPI(version, f"{group}/{version}", package, default)


@dataclass(frozen=True, slots=True)
class TransformationRules:
    """What Kueue's validateResourceTransformations checks, as read from pkg/config/validation.go."""

    strategies: tuple[str, ...]  # the supported strategy values, in the function's order
    unique_inputs: bool
    validated_version: str  # the configapi package validation.go imports: the version Kueue validates


def transformation_rules(tree: Path) -> TransformationRules:
    """The rules of validateResourceTransformations; a ValueError where the function checks anything else."""
    path = tree / "pkg" / "config" / "validation.go"
    toks = tokens(path.read_text(encoding="utf-8"))
    imported = ""
    for index, token in enumerate(toks):
        if token.text == "configapi" and toks[index + 1].kind == "string":
            imported = go_string(toks[index + 1]).rsplit("/", 1)[-1]
    body = _function_body(toks, "validateResourceTransformations", path)
    errors: list[tuple[str, str]] = []  # (field.Constructor, the child path it names)
    strategies: list[str] = []
    for index, token in enumerate(body):
        if token.text == "field" and body[index + 1].text == "." and body[index + 3].text == "(":
            constructor = body[index + 2].text
            call = body[index + 3 : _closing(body, index + 3) + 1]
            children = [go_string(call[j + 2]) for j in range(len(call) - 2) if call[j].text == "Child"]
            errors.append((constructor, children[-1] if children else ""))
    # the allowed values: the []configapi.ResourceTransformationStrategy{...} literal
    for index, token in enumerate(body):
        if token.text == "ResourceTransformationStrategy" and body[index + 1].text == "{":
            j = index + 2
            while body[j].text != "}":
                if body[j].text == "configapi" and body[j + 1].text == ".":
                    strategies.append(body[j + 2].text)
                j += 1
    known = {("NotSupported", "strategy"), ("Duplicate", "input")}
    unknown = sorted(set(errors) - known)
    if unknown or not errors:
        raise ValueError(
            f"{path.name}: validateResourceTransformations reports {unknown or 'nothing'} beyond the rules "
            "tests/kueue_source.py implements (a supported strategy, unique inputs): implement the new rule there"
        )
    return TransformationRules(tuple(strategies), ("Duplicate", "input") in errors, imported)


def _closing(toks: list[Token], opening: int) -> int:
    """The index of the bracket that closes the one at `opening`."""
    depth = 0
    for index in range(opening, len(toks)):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(toks[index].text, 0)
        if depth == 0:
            return index
    raise ValueError("unbalanced brackets")


def _function_body(toks: list[Token], name: str, path: Path, method: str = "") -> list[Token]:
    """The tokens inside the braces of `func name` (or of the first method `method`)."""
    for index, token in enumerate(toks):
        if token.text != "func":
            continue
        if (method and toks[index + 1].text == "(" and toks[_closing(toks, index + 1) + 1].text == method) or (
            not method and toks[index + 1].text == name
        ):
            start = next(j for j in range(index, len(toks)) if toks[j].text == "{")
            return toks[start + 1 : _closing(toks, start)]
    raise ValueError(f"{path.name}: no func {name or method}")


# --- decoding and validating a rendering ----------------------------------------------------------------------

QUANTITY = Named("Quantity", "resource")
# Kubernetes types the configuration uses from outside Kueue's tree (k8s.io/api, k8s.io/apimachinery).
EXTERNAL: dict[tuple[str, str], GoType] = {
    ("metav1", "TypeMeta"): Struct(
        (
            Field("Kind", Named("string"), "kind", True, False),
            Field("APIVersion", Named("string"), "apiVersion", True, False),
        )
    ),
    ("corev1", "ResourceName"): Named("string"),
    ("corev1", "ResourceList"): Map(Named("ResourceName", "corev1"), QUANTITY),
}
_INTEGERS = {
    "int8": 8, "int16": 16, "int32": 32, "int64": 64, "int": 64,
    "uint8": -8, "uint16": -16, "uint32": -32, "uint64": -64, "uint": -64, "byte": -8,
}  # fmt: skip


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML whose duplicate keys fail, as Kueue's strict decoder's do."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
    repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
    if repeated:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate field {', '.join(repeated)}", node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str) -> Any:
    """One YAML document, its duplicate keys refused."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass


def decode_errors(document: Any, api: ConfigAPI) -> list[str]:
    """Why Kueue's strict decoder would refuse `document` as `api`'s Configuration; empty where it decodes."""
    problems: list[str] = []
    if not isinstance(document, dict):
        return [f"the document is a {type(document).__name__}, not a mapping"]
    if document.get("apiVersion") != api.api_version or document.get("kind") != "Configuration":
        problems.append(
            f"apiVersion/kind {document.get('apiVersion')}/{document.get('kind')}: Kueue registers Configuration "
            f"as {api.api_version}"
        )
    _walk(document, Named("Configuration"), "", api.package, problems, root=True)
    return problems


def _fields(struct: Struct, package: Package, path: str) -> dict[str, Field]:
    """A struct's JSON fields, embedded structs' promoted (encoding/json's rule for untagged embedding)."""
    found: dict[str, Field] = {}
    for member in struct.fields:
        if member.skipped:
            continue
        if member.json_name:
            found.setdefault(member.json_name, member)
            continue
        inner = _resolve(member.type.elem if isinstance(member.type, Pointer) else member.type, package)
        if not isinstance(inner, Struct):
            raise ValueError(f"{path}: embedded {member.type} is not a struct this reader knows")
        for name, promoted in _fields(inner, package, path).items():
            found.setdefault(name, promoted)
    return found


def _resolve(typ: GoType, package: Package) -> GoType:
    """Through named types to what JSON sees: a builtin name, QUANTITY, or a composite type."""
    seen = 0
    while isinstance(typ, Named) and seen < 20:
        seen += 1
        if typ == QUANTITY:
            return typ
        if typ.package:
            external = EXTERNAL.get((typ.package, typ.name))
            if external is None:
                return Opaque(f"{typ.package}.{typ.name}")
            typ = external
        elif typ.name in package.types:
            typ = package.types[typ.name]
        else:
            return typ  # a builtin
    return typ


def _walk(value: Any, typ: GoType, path: str, package: Package, problems: list[str], root: bool = False) -> None:
    where = path or "the document"
    kind = _resolve(typ, package)
    if value is None:
        if not isinstance(kind, Pointer | Slice | Map):
            problems.append(f"{where}: null where Kueue's {_shown(typ)} takes a value")
        return
    if isinstance(kind, Pointer):
        _walk(value, kind.elem, path, package, problems)
    elif isinstance(kind, Slice):
        if not isinstance(value, list):
            problems.append(f"{where}: a {type(value).__name__} where Kueue's {_shown(typ)} takes a list")
            return
        for index, item in enumerate(value):
            _walk(item, kind.elem, f"{path}[{index}]", package, problems)
    elif isinstance(kind, Map):
        if not isinstance(value, dict):
            problems.append(f"{where}: a {type(value).__name__} where Kueue's {_shown(typ)} takes a mapping")
            return
        for key, item in value.items():
            _walk(key, kind.key, f"{path}[{key!r}] (key)", package, problems)
            _walk(item, kind.elem, f"{path}[{key!r}]", package, problems)
    elif isinstance(kind, Struct):
        if not isinstance(value, dict):
            problems.append(f"{where}: a {type(value).__name__} where Kueue's {_shown(typ)} takes a mapping")
            return
        fields = _fields(kind, package, where)
        for key, item in value.items():
            member = fields.get(key) if isinstance(key, str) else None
            if member is None:
                problems.append(f'{where}: unknown field "{key}" in Kueue\'s {_shown(typ)}')
                continue
            _walk(item, member.type, f"{path}.{key}" if path else key, package, problems)
        if not root:
            for name, member in fields.items():
                if not member.omitempty and name not in value:
                    problems.append(f'{where}: no "{name}", which Kueue\'s {_shown(typ)} always carries')
    elif kind == QUANTITY:
        if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
            problems.append(f"{where}: a {type(value).__name__} where Kueue takes a quantity")
            return
        try:
            parse_quantity(value)
        except QuantityError as exc:
            problems.append(f"{where}: {value!r} is not a resource.Quantity: {exc}")
    elif isinstance(kind, Named) and kind.name == "string":
        if not isinstance(value, str):
            problems.append(f"{where}: a {type(value).__name__} where Kueue's {_shown(typ)} takes a string")
    elif isinstance(kind, Named) and kind.name == "bool":
        if not isinstance(value, bool):
            problems.append(f"{where}: a {type(value).__name__} where Kueue's {_shown(typ)} takes true or false")
    elif isinstance(kind, Named) and kind.name in _INTEGERS:
        bits = _INTEGERS[kind.name]
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if bits > 0 else (0, 2 ** (-bits) - 1)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            problems.append(f"{where}: {value!r} where Kueue's {_shown(typ)} takes an {kind.name}")
    elif isinstance(kind, Named) and kind.name in ("float32", "float64"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{where}: {value!r} where Kueue's {_shown(typ)} takes a number")
    else:
        problems.append(f"{where}: cannot check a value of Kueue's {_shown(typ)} ({kind})")


def _shown(typ: GoType) -> str:
    if isinstance(typ, Named):
        return f"{typ.package}.{typ.name}" if typ.package else typ.name
    if isinstance(typ, Pointer):
        return "*" + _shown(typ.elem)
    if isinstance(typ, Slice):
        return "[]" + _shown(typ.elem)
    if isinstance(typ, Map):
        return f"map[{_shown(typ.key)}]{_shown(typ.elem)}"
    return "struct" if isinstance(typ, Struct) else typ.text


def validation_errors(document: dict[str, Any], api: ConfigAPI, rules: TransformationRules) -> list[str]:
    """What Kueue's validateResourceTransformations (pkg/config/validation.go) says of a decoded document,
    after defaults.go has set the strategy a transformation leaves out."""
    resources = document.get("resources") or {}
    problems: list[str] = []
    seen: set[str] = set()
    for index, transformation in enumerate(resources.get("transformations") or []):
        strategy = transformation.get("strategy") or api.default_strategy
        supported = [api.package.constants[name][1] for name in rules.strategies]
        if strategy not in supported:
            problems.append(
                f'resources.transformations[{index}].strategy: Unsupported value: "{strategy}": supported values: '
                + ", ".join(f'"{s}"' for s in supported)
            )
        given = transformation.get("input", "")
        if rules.unique_inputs and given in seen:
            problems.append(f'resources.transformations[{index}].input: Duplicate value: "{given}"')
        seen.add(given)
    return problems


def deepcopy_kinds(directory: Path) -> dict[tuple[str, str], str]:
    """(struct, Go field) -> pointer, slice or map, as Kueue's generated zz_generated.deepcopy.go copies them: a
    second reading of the same declarations, by a different tool, to check this module's parser against."""
    toks = tokens((directory / "zz_generated.deepcopy.go").read_text(encoding="utf-8"))
    found: dict[tuple[str, str], str] = {}
    for index, token in enumerate(toks):
        if not (token.text == "func" and toks[index + 1].text == "("):
            continue
        receiver_end = _closing(toks, index + 1)
        if toks[receiver_end + 1].text != "DeepCopyInto":
            continue
        struct = toks[receiver_end - 1].text  # func (in *Name) DeepCopyInto
        body = _function_body(toks[index:], "", directory, method="DeepCopyInto")
        for j, tok in enumerate(body):
            # in, out := &in.Field, &out.Field  then  *out = new(...) | make([]...) | make(map[...)
            if tok.text == ":=" and body[j + 1].text == "&" and body[j + 2].text == "in":
                name = body[j + 4].text
                k = j + 5
                while not (body[k].text == "*" and body[k + 1].text == "out" and body[k + 2].text == "="):
                    k += 1
                made, first = body[k + 3].text, body[k + 5]
                if made == "new":
                    found[(struct, name)] = "pointer"
                elif made == "make" and first.text in ("map", "["):
                    found[(struct, name)] = "map" if first.text == "map" else "slice"
                elif made == "make":  # make(corev1.ResourceList, n): a named map or slice type
                    named = Named(body[k + 7].text, first.text) if body[k + 6].text == "." else Named(first.text)
                    found[(struct, name)] = f"{_shown(named)}"
    return found


def container_kind(typ: GoType, package: Package) -> str:
    """pointer, slice, map, or the type's name: what a field is once named types are followed."""
    kind = _resolve(typ, package)
    if isinstance(kind, Pointer | Slice | Map):
        return type(kind).__name__.lower()
    return _shown(typ)


def parser_disagreements(package: Package) -> list[str]:
    """Where this module's reading of the package's structs differs from what deepcopy-gen generated for them."""
    problems = []
    for (struct, name), generated in deepcopy_kinds(package.directory).items():
        declared = package.types.get(struct)
        fields = [f for f in declared.fields if f.go_name == name] if isinstance(declared, Struct) else []
        if not fields:
            problems.append(f"{struct}.{name}: copied by deepcopy-gen, not found by this parser")
            continue
        if "." in generated or generated[:1].isupper():  # a named container type: follow it as well
            package_name, _, type_name = generated.rpartition(".")
            generated = container_kind(Named(type_name, package_name), package)
        parsed = container_kind(fields[0].type, package)
        if parsed != generated:
            problems.append(f"{struct}.{name}: parsed as {parsed}, deepcopy-gen copies a {generated}")
    return problems
