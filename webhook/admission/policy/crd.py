"""The GPUPolicy CustomResourceDefinition, generated from the loader's field tables (policyfields.py).

Each field's constraints come from `schema.field_schema`, the same walk that writes the editors' JSON Schema,
rewritten into the OpenAPI subset the API server accepts (a structural schema): `const` becomes an enum of one,
a numeric `exclusiveMinimum` becomes `minimum` with `exclusiveMinimum: true`, `uniqueItems` becomes a set
list, and a value that may also be "auto" or false becomes int-or-string or untyped. The API server then
refuses wrong types, choices, bounds, patterns and lengths itself.

What the schema leaves to the validating webhook (/validate, whose entry is `gpupolicies.gpu-admission.io`):
- misspelt fields. spec and every object under it keep unknown fields (`x-kubernetes-preserve-unknown-fields`)
  instead of pruning them, which would turn a rule off without a word; the webhook refuses them with the
  loader's message ("unknown field (did you mean ...)");
- the rules between fields and between policies (schema.py's `allOf`, two policies claiming one namespace);
- defaults: none is written into the schema (the API server would store them, and the loader refuses some
  fields under other modes), so a stored object holds what its author wrote; the descriptions name them.

`make manifests` writes the chart's crds/gpupolicies.yaml and the kustomize component's copy from `crd_text()`;
`gpu-webhook policy crd` prints it. tests/test_policy_crd.py fails while a copy differs or the CRD and the
loader disagree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from webhook.admission.policy.objects import GROUP, PLURAL, RESOURCE, VERSION
from webhook.admission.policy.policyfields import DOCUMENT, KIND, Field, lookup
from webhook.admission.policy.schema import field_schema

SINGULAR = "gpupolicy"
SHORT_NAMES = ("gpupol",)
CATEGORIES = ("gpu-admission",)
PRESERVE = "x-kubernetes-preserve-unknown-fields"

# The status the server writes (a served policy's effective settings, and whether it is served).
READY = "Ready"  # the condition type
SERVED = "Served"  # its reason where the policy is served (status True)
INVALID = "Invalid"  # its reason where it is not (status False, the loader's lines in the message)
NAMESPACES_SHOWN = 10  # status.namespaces: the first ten namespaces governed, sorted


def _default_text(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _description(field: Field) -> str:
    """The table's description, with the default the loader fills in (never a schema `default`)."""
    if field.default is None:
        return field.description
    return f"{field.description} Default: {_default_text(field.default)}."


def _openapi(node: dict[str, Any]) -> dict[str, Any]:
    """One JSON Schema node of `field_schema`, in the API server's OpenAPI v3.0 structural subset."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "uniqueItems":
            out["x-kubernetes-list-type"] = "set"  # the API server refuses duplicates; uniqueItems is forbidden
        elif key == "items":
            out["items"] = _openapi(value)
        elif key not in ("default", "additionalProperties", "properties", "required"):
            out[key] = value
    return out


def _section(fields: tuple[Field, ...]) -> dict[str, Any]:
    """An object of `fields` that keeps unknown fields, so that the webhook can name a misspelt one."""
    schema: dict[str, Any] = {"type": "object"}
    if fields:
        schema["properties"] = {f.name: field_crd(f) for f in fields}
    required = [f.name for f in fields if f.required]
    if required:
        schema["required"] = required
    schema[PRESERVE] = True
    return schema


def _with_alternatives(field: Field, typed: dict[str, Any]) -> dict[str, Any]:
    """A field that also takes values of another type (replicas: 4 or auto; steering: true or auto)."""
    words = [value for value in field.alternatives if isinstance(value, str)]
    if len(words) == len(field.alternatives) and field.kind == "string" and "enum" in typed:
        return {**typed, "enum": [*typed["enum"], *words]}  # gpu.model: a model or auto
    if len(words) == len(field.alternatives) and field.kind == "integer":
        # An integer's bounds apply to integers and a pattern to strings only, so together they say "n or auto".
        node = {k: v for k, v in typed.items() if k != "type"}
        pattern = "|".join(words)
        return {**node, "x-kubernetes-int-or-string": True, "pattern": f"^({pattern})$"}
    # A boolean or a string, or a string or false (YAML 1.1, which kubectl reads, makes `off` false): no
    # structural type holds both, so the node is untyped and the webhook checks it.
    return {"description": typed["description"], PRESERVE: True}


def field_crd(field: Field) -> dict[str, Any]:
    """One field's structural schema, from its table entry."""
    plain = dataclasses.replace(field, default=None, alternatives=(), fields=())
    node = _openapi(field_schema(plain))
    node["description"] = _description(field)
    if field.kind == "object":
        node.update(_section(field.fields))
    if field.kind == "array" and field.items == "object":
        node["items"].update(_section(field.fields))
    if field.alternatives:
        node = _with_alternatives(field, node)
    return node


def _condition() -> dict[str, Any]:
    """metav1.Condition, as every Kubernetes API writes it."""
    string = {"type": "string"}
    return {
        "type": "object",
        "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": {**string, "description": f"{READY}: whether the policy is served.", "maxLength": 316},
            "status": {**string, "enum": ["True", "False", "Unknown"]},
            "reason": {
                **string, "description": f"{SERVED} or {INVALID}.", "maxLength": 1024, "minLength": 1,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            },
            "message": {**string, "description": "Why, in the loader's words where it is invalid.", "maxLength": 32768},
            "lastTransitionTime": {**string, "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        },
    }  # fmt: skip


def status_schema() -> dict[str, Any]:
    """What the server writes through the status subresource: the served policy's effective settings."""
    return {
        "type": "object",
        "description": "Written by the webhook server: whether the policy is served, and what it does.",
        "properties": {
            "observedGeneration": {
                "type": "integer", "format": "int64", "description": "The generation this status describes.",
            },
            "mode": {"type": "string", "description": "The effective sharing mode (spec.sharing.mode or its default)."},
            "enforcement": {"type": "string", "description": "The effective enforcement."},
            "quota": {"type": "string", "description": "The effective spec.cluster.quota: deny, warn or off."},
            "matchedNamespaces": {"type": "integer", "description": "How many namespaces the policy governs now."},
            "namespaces": {
                "type": "array", "items": {"type": "string"},
                "description": f"The first {NAMESPACES_SHOWN} namespaces the policy governs, sorted.",
            },
            "conditions": {
                "type": "array",
                "description": f"{READY}: True ({SERVED}) where the policy is served, False ({INVALID}) where not.",
                "items": _condition(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }  # fmt: skip


def _document(name: str) -> Field:
    return next(f for f in DOCUMENT if f.name == name)


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of version v1: the spec from the field tables, and the status the server writes."""
    name = lookup("metadata.name")
    return {
        "type": "object",
        "description": "A gpu-admission namespace policy: which namespaces, and the rules for their GPU requests.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": _document("apiVersion").description},
            "kind": {"type": "string", "description": _document("kind").description},
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "pattern": name.pattern, "maxLength": name.max_length}},
            },
            "spec": field_crd(_document("spec")),
            "status": status_schema(),
        },
    }


PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Mode", "type": "string", "jsonPath": ".status.mode", "description": "The effective sharing mode."},
    {"name": "Enforcement", "type": "string", "jsonPath": ".status.enforcement"},
    {"name": "Quota", "type": "string", "jsonPath": ".status.quota", "description": "spec.cluster.quota, in effect."},
    {"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces", "description": "As written."},
    {
        "name": "Ready", "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{READY}")].status',
        "description": "Whether the policy is served.",
    },
    {
        "name": "Matched", "type": "integer", "jsonPath": ".status.matchedNamespaces", "priority": 1,
        "description": "How many namespaces the policy governs now.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)  # fmt: skip


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition: cluster-scoped GPUPolicy objects, one version, with a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": RESOURCE, "labels": {"app.kubernetes.io/name": "gpu-admission"}},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "plural": PLURAL,
                "singular": SINGULAR,
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(column) for column in PRINTER_COLUMNS],
                }
            ],
        },
    }


HEADER = """\
# Generated by `make manifests` from the policy loader's field tables (webhook/admission/policy/crd.py); edit
# the tables, not this file. `gpu-webhook policy crd` prints the same. Helm installs crds/ on the first install
# only: before an upgrade, `kubectl apply --server-side -f` this file (docs/operations.md).
"""


def crd_text() -> str:
    """The CRD as the repository's copies hold it."""
    body = yaml.safe_dump(crd(), sort_keys=False, width=120, default_flow_style=False, allow_unicode=True)
    return HEADER + body
