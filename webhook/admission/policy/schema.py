"""The JSON Schema of a policy document, generated from the loader's own field tables (policyfields.py).

Editors (the YAML language server: `# yaml-language-server: $schema=...`) complete and check policy files
with it; `gpu-webhook policy schema` prints it and schema/gpu-policy.schema.json is its copy in the repository
(tests/test_policy_schema.py fails while they differ). The loader stays the authority: it also checks what a
schema cannot say (valid globs, a MIG profile of the named model, set-wide conflicts between policies).
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

from webhook.admission.policy.loader import spec_rules_schema
from webhook.admission.policy.policyfields import DOCUMENT, Field

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "https://gpu-admission.io/schemas/gpu-policy.schema.json"


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def field_schema(field: Field) -> dict[str, Any]:
    """One field's schema, from its table entry."""
    schema: dict[str, Any] = {"description": field.description, "type": field.kind}
    if field.const is not None:
        schema["const"] = field.const
    if field.choices and field.kind != "array":
        schema["enum"] = list(field.choices)
    text = schema if field.kind != "array" else {}  # an array's pattern and length are its items'
    if field.pattern is not None:
        text["pattern"] = field.pattern
    if field.max_length is not None:
        text["maxLength"] = field.max_length
    if field.minimum is not None:
        schema["minimum"] = field.minimum
    if field.above is not None:
        schema["exclusiveMinimum"] = _number(field.above)
    if field.at_most is not None:
        schema["maximum"] = _number(field.at_most)
    if field.kind == "array":
        items: dict[str, Any] = {"type": field.items}
        if field.choices:
            items["enum"] = list(field.choices)
        if field.items == "object":
            items.update(section_schema(field.fields))
        items.update(text)
        schema["items"] = items
        if field.min_items is not None:
            schema["minItems"] = field.min_items
        if field.unique:
            schema["uniqueItems"] = True
    if field.kind == "object" and field.fields:
        schema.update(section_schema(field.fields))
    if field.default is not None:
        schema["default"] = list(field.default) if isinstance(field.default, tuple) else field.default
    if field.alternatives:  # e.g. replicas: 4 or auto
        typed = {k: v for k, v in schema.items() if k not in ("description", "default")}
        schema = {k: v for k, v in schema.items() if k in ("description", "default")}
        schema["anyOf"] = [typed, {"enum": list(field.alternatives)}]
    return schema


def section_schema(fields: tuple[Field, ...]) -> dict[str, Any]:
    """A mapping of `fields` and nothing else (the loader reports unknown fields at every level)."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.name: field_schema(f) for f in fields},
        "additionalProperties": False,
    }
    required = [f.name for f in fields if f.required]
    if required:
        schema["required"] = required
    return schema


def policy_schema() -> dict[str, Any]:
    """The whole schema: one policy document (a YAML file may hold several, each checked on its own)."""
    schema: dict[str, Any] = {
        "$schema": DIALECT,
        "$id": SCHEMA_ID,
        "title": "GPUPolicy",
        "description": "A gpu-admission namespace policy (one YAML document of a policy file).",
    }
    schema.update(section_schema(DOCUMENT))
    schema["properties"]["spec"]["allOf"] = spec_rules_schema()  # the loader's rules between fields
    return schema


def schema_text() -> str:
    """The schema as the repository's file holds it."""
    return json.dumps(policy_schema(), indent=2) + "\n"
