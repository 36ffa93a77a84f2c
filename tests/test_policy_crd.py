"""The GPUPolicy CustomResourceDefinition (webhook/admission/policy/crd.py) against the loader, its source of truth.

Checked here, offline: every committed copy is the generated one; every field the loader accepts, at every level,
is in the CRD's schema; the schema is structural (the API server's rules, checked by the small checker below),
carries no defaults, and keeps unknown fields under spec so that the webhook names a misspelt one instead of the
API server pruning it; the status and the printer columns have the shape the server writes and kubectl shows;
and every policy document shipped or given as an example validates against the schema as kubectl would send
it (go-yaml's reading of YAML). Against a real kube-apiserver (KUBEBUILDER_ASSETS, else skipped): the CRD is
accepted, kubectl applies every shipped policy file, `kubectl get gpupolicies` shows the columns, and the
status is written through its subresource.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.test_policy_loader import SHARED, doc
from tests.test_policy_schema import VALID_SPECS
from webhook.admission.policy import loader
from webhook.admission.policy.crd import (
    INVALID,
    PRESERVE,
    READY,
    SERVED,
    crd,
    crd_text,
    openapi_schema,
)
from webhook.admission.policy.loader import PolicyLoadError, parse_policy_sources
from webhook.cli import goyaml, webhooks

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted([*(ROOT / "policies").glob("*.yaml"), *(ROOT / "examples" / "policies").glob("*.yaml")])


def spec_schema() -> dict[str, Any]:
    return openapi_schema()["properties"]["spec"]


# ------------------------------------------------------------------------------------ one source of truth


def test_every_committed_copy_is_the_generated_one() -> None:
    for path in webhooks.CRD_COPIES:
        assert (ROOT / path).read_text() == crd_text(), f"{path} is stale: run `make manifests`"


def test_policy_crd_prints_the_generated_crd() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "crd"], capture_output=True, text=True, check=True
    )
    assert result.stdout == crd_text()
    assert yaml.safe_load(result.stdout) == crd()


@pytest.mark.parametrize(
    ("path", "accepted"),
    [
        (("spec",), "_SPEC_FIELDS"),
        (("spec", "sharing"), "_SHARING_FIELDS"),
        (("spec", "gpu"), "_GPU_FIELDS"),
        (("spec", "limits"), "_LIMITS_FIELDS"),
        (("spec", "cluster"), "_CLUSTER_FIELDS"),
        (("spec", "cluster", "assumeNodes", "[]"), "_NODE_SHAPE_FIELDS"),
        (("spec", "deviceClasses"), "_DEVICE_CLASSES_FIELDS"),
    ],
)
def test_every_field_the_loader_accepts_is_in_the_crd(path: tuple[str, ...], accepted: str) -> None:
    """A field added to the loader but not to the tables fails here; so does one the loader does not know."""
    node = openapi_schema()
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    assert set(node["properties"]) == set(getattr(loader, accepted)), ".".join(path)
    assert node[PRESERVE] is True, f"{'.'.join(path)}: unknown fields must reach the webhook, not be pruned"


def test_the_crd_carries_the_loaders_types_enums_and_bounds() -> None:
    spec = spec_schema()["properties"]
    sharing = spec["sharing"]["properties"]
    assert spec["enforcement"]["enum"] == ["enforce", "warn", "audit"]
    assert sharing["mode"]["enum"] == ["exclusive", "time-slicing", "mps", "mig", "memory"]
    # replicas: an integer of at least 2, or auto (bounds apply to integers, the pattern to strings).
    assert {k: v for k, v in sharing["replicas"].items() if k != "description"} == {
        "minimum": 2, "x-kubernetes-int-or-string": True, "pattern": "^(auto)$",
    }  # fmt: skip
    assert spec["memoryFraction"] | {"description": ""} == {
        "description": "", "type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1,
    }  # fmt: skip
    assert spec["gpu"]["properties"]["model"]["enum"][-1] == "auto"
    assert spec["namespaces"]["x-kubernetes-list-type"] == "set" and spec["namespaces"]["minItems"] == 1
    assert spec_schema()["required"] == ["namespaces"]
    # true, false or auto; deny, warn, off or false (YAML 1.1 reads `off` as false): no structural type holds
    # both, so these are the webhook's to check.
    for node in (spec["steering"], *(spec["cluster"]["properties"][k] for k in ("fits", "offered", "drift", "quota"))):
        assert set(node) == {"description", PRESERVE}


def _walk(json_node: dict[str, Any], crd_node: dict[str, Any], path: str) -> Any:
    """(path, JSON Schema node, CRD node) for every field both schemas describe."""
    yield path, json_node, crd_node
    for name, child in json_node.get("properties", {}).items():
        yield from _walk(child, crd_node["properties"][name], f"{path}.{name}")
    if "items" in json_node and "items" in crd_node:
        yield from _walk(json_node["items"], crd_node["items"], f"{path}[]")


def test_every_bound_of_the_editors_schema_is_in_the_crd() -> None:
    """The two schemas come from one table: a bound, choice or pattern the editors get, the API server checks."""
    from webhook.admission.policy.schema import policy_schema

    checked = 0
    for path, json_node, crd_node in _walk(policy_schema()["properties"]["spec"], spec_schema(), "spec"):
        for key in ("enum", "minimum", "maximum", "pattern", "maxLength", "minItems"):
            if key in json_node:
                assert crd_node[key] == json_node[key], f"{path}: {key}"
                checked += 1
        if "exclusiveMinimum" in json_node:
            assert (crd_node["minimum"], crd_node["exclusiveMinimum"]) == (json_node["exclusiveMinimum"], True), path
        if json_node.get("uniqueItems"):
            assert crd_node["x-kubernetes-list-type"] == "set", path
        if "type" in json_node and "type" in crd_node:
            assert crd_node["type"] == json_node["type"], path
    assert checked >= 20


def test_there_are_no_defaults_and_the_descriptions_name_them() -> None:
    """The API server would write a default into every stored spec, and the loader refuses some fields under
    other modes: a stored object holds what its author wrote."""
    assert not list(_keys(crd(), "default"))
    assert spec_schema()["properties"]["enforcement"]["description"].endswith("Default: enforce.")
    assert spec_schema()["properties"]["sharing"]["properties"]["mode"]["description"].endswith("Default: exclusive.")


def _keys(node: Any, key: str, path: str = "") -> Any:
    """Every path under `node` where a mapping has `key` (property names are keys of `properties`, not fields)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and not path.endswith(".properties"):
                yield path
            yield from _keys(v, key, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _keys(v, key, f"{path}[{i}]")


# ------------------------------------------------------------------------------------ a structural schema

FORBIDDEN = {"$schema", "$id", "$ref", "id", "const", "if", "then", "else", "definitions", "dependencies",
             "patternProperties", "additionalItems", "default"}  # fmt: skip
IN_JUNCTORS_FORBIDDEN = {"type", "description", "default", "additionalProperties", "nullable", "title"}
SCALARS = {"string", "integer", "number", "boolean"}


def structural_problems(node: dict[str, Any], path: str = "", *, root: bool = True) -> list[str]:
    """The apiextensions rules this CRD must meet (Kubernetes: "Specifying a structural schema"), as lines."""
    problems = [f"{path}: {key} is not allowed" for key in FORBIDDEN & set(node)]
    typed = "type" in node
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if int_or_string and typed:
        problems.append(f"{path}: x-kubernetes-int-or-string with a type")
    if not typed and not int_or_string and node.get(PRESERVE) is not True:
        problems.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    if node.get("uniqueItems") is True:
        problems.append(f"{path}: uniqueItems (use x-kubernetes-list-type: set)")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{path}: {key} must be a boolean (OpenAPI v3.0)")
    if node.get("x-kubernetes-list-type") == "set" and node["items"].get("type") not in SCALARS:
        problems.append(f"{path}: a set of non-scalars")
    if node.get("x-kubernetes-list-type") == "map":
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in node["items"].get("required", []):
                problems.append(f"{path}: map key {key} is not required")
    for junctor in ("anyOf", "allOf", "oneOf", "not"):
        for branch in node.get(junctor, []) if junctor != "not" else [node.get("not", {})]:
            problems += [f"{path}.{junctor}: {key} inside a junctor" for key in IN_JUNCTORS_FORBIDDEN & set(branch)]
            outside = set(node.get("properties", {}))
            problems += [
                f"{path}.{junctor}: {name} only inside" for name in set(branch.get("properties", {})) - outside
            ]
    for name, child in node.get("properties", {}).items():
        if root and name == "metadata":
            extra = set(child.get("properties", {})) - {"name", "generateName"}
            problems += [f"metadata.{field}: only name and generateName may be constrained" for field in extra]
        problems += structural_problems(child, f"{path}.{name}", root=False)
    if "items" in node:
        problems += structural_problems(node["items"], f"{path}[]", root=False)
    return problems


def test_the_checker_finds_what_the_api_server_refuses() -> None:
    bad = {
        "type": "object",
        "properties": {
            "a": {"description": "no type"},
            "b": {"type": "integer", "default": 1},
            "c": {"type": "number", "minimum": 0, "exclusiveMinimum": 0},
            "d": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "e": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
            "f": {"type": "string", "const": "x"},
            "g": {"x-kubernetes-int-or-string": True, "type": "string"},
            "h": {"type": "object", "anyOf": [{"type": "object", "properties": {"y": {"type": "string"}}}]},
        },
    }
    found = "\n".join(structural_problems(bad))
    expected = [
        ".a: no type", ".b: default", ".c: exclusiveMinimum must", ".d: uniqueItems", ".e: properties and",
        ".f: const", ".g: x-kubernetes-int-or-string with", ".h.anyOf: type inside", ".h.anyOf: y only",
    ]  # fmt: skip
    for fragment in expected:
        assert fragment in found, fragment


def test_the_schema_is_structural() -> None:
    assert structural_problems(openapi_schema()) == []


def test_spec_and_every_object_under_it_keep_unknown_fields() -> None:
    """A misspelt field is never pruned (which would turn a rule off silently): it reaches the webhook."""

    def objects(node: dict[str, Any], path: str) -> Any:
        if node.get("type") == "object":
            yield path, node
        for name, child in node.get("properties", {}).items():
            yield from objects(child, f"{path}.{name}")
        if "items" in node:
            yield from objects(node["items"], f"{path}[]")

    found = list(objects(spec_schema(), "spec"))
    assert len(found) >= 8
    assert [path for path, node in found if node.get(PRESERVE) is not True] == []


# ------------------------------------------------------------------------------------ the definition itself


def test_the_definition_names_a_cluster_scoped_kind_with_a_status_subresource() -> None:
    definition = crd()
    assert definition["metadata"]["name"] == "gpupolicies.gpu-admission.io"
    spec = definition["spec"]
    assert (spec["group"], spec["scope"]) == ("gpu-admission.io", "Cluster")
    assert spec["names"] == {
        "plural": "gpupolicies", "singular": "gpupolicy", "kind": "GPUPolicy", "listKind": "GPUPolicyList",
        "shortNames": ["gpupol"], "categories": ["gpu-admission"],
    }  # fmt: skip
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}


def test_the_status_has_the_shape_the_server_writes() -> None:
    status = openapi_schema()["properties"]["status"]["properties"]
    assert {name: node["type"] for name, node in status.items()} == {
        "observedGeneration": "integer", "mode": "string", "enforcement": "string", "quota": "string",
        "matchedNamespaces": "integer", "namespaces": "array", "conditions": "array",
    }  # fmt: skip
    conditions = status["conditions"]
    assert (conditions["x-kubernetes-list-type"], conditions["x-kubernetes-list-map-keys"]) == ("map", ["type"])
    condition = conditions["items"]["properties"]
    assert set(condition) == {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
    assert condition["status"]["enum"] == ["True", "False", "Unknown"]
    assert condition["lastTransitionTime"]["format"] == "date-time"
    assert (READY, SERVED, INVALID) == ("Ready", "Served", "Invalid")


def test_the_printer_columns() -> None:
    (version,) = crd()["spec"]["versions"]
    columns = {c["name"]: (c["jsonPath"], c["type"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Mode": (".status.mode", "string", 0),
        "Enforcement": (".status.enforcement", "string", 0),
        "Namespaces": (".spec.namespaces", "string", 0),
        "Ready": ('.status.conditions[?(@.type=="Ready")].status', "string", 0),
        "Quota": (".status.quota", "string", 0),
        "Matched": (".status.matchedNamespaces", "integer", 1),
        "Age": (".metadata.creationTimestamp", "date", 0),
    }


# ------------------------------------------------------------------------------------ the files are the objects


def json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI v3.0 subset as JSON Schema (draft 2020-12), as the API server validates it: int-or-string is
    an integer or a string, a boolean exclusiveMinimum makes `minimum` exclusive, a set list has unique items,
    and an untyped node that keeps unknown fields takes anything."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: json_schema(child) for name, child in value.items()}
        elif key == "items":
            out[key] = json_schema(value)
        elif key == "x-kubernetes-int-or-string":
            out["type"] = ["integer", "string"]
        elif key == "x-kubernetes-list-type":
            if value == "set":
                out["uniqueItems"] = True
        elif key == "exclusiveMinimum":
            out["exclusiveMinimum"] = node["minimum"]
        elif key == "format" and value in ("int64", "int32"):
            continue
        elif not key.startswith("x-kubernetes-"):
            out[key] = value
    if out.get("exclusiveMinimum") is not None:
        out.pop("minimum", None)
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json_schema(openapi_schema())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _as_kubectl_reads(path: Path) -> list[dict[str, Any]]:
    """The documents as kubectl sends them (go-yaml v2's scalars), skipping empty ones."""
    return [document for document in yaml.load_all(path.read_text(), Loader=goyaml.Loader) if document]


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(ROOT)) for p in SHIPPED])
def test_every_shipped_policy_document_is_a_valid_object(validator, path: Path) -> None:
    documents = _as_kubectl_reads(path)
    assert documents, path
    for document in documents:
        assert (document["apiVersion"], document["kind"]) == ("gpu-admission.io/v1", "GPUPolicy")
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
        assert errors == [], path


@pytest.mark.parametrize("spec", VALID_SPECS)
def test_what_the_loader_accepts_the_crd_accepts(validator, spec: str) -> None:
    assert validator.is_valid(yaml.load(doc(spec), Loader=goyaml.Loader)), spec


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("namespaces: []", "no namespace"),
        ("namespaces: [a, a]", "a namespace twice"),
        ("namespaces: [a]\nenforcement: strict", "an unknown enforcement"),
        ("namespaces: [a]\nsharing: {mode: time-slicing, replicas: 1}", "one replica"),
        ("namespaces: [a]\nsharing: {mode: time-slicing, replicas: many}", "replicas neither a number nor auto"),
        (SHARED + "memoryFraction: 0", "a zero fraction"),
        ("namespaces: [a]\nlimits: {maxPerPod: '8'}", "a string for an integer"),
        ("namespaces: [a]\nsharing: {mode: mig, migProfile: 1g}", "a malformed MIG profile"),
    ],
)
def test_the_api_server_itself_refuses_wrong_types_choices_and_bounds(validator, spec: str, why: str) -> None:
    document = yaml.load(doc(spec), Loader=goyaml.Loader)
    assert not validator.is_valid(document), why
    with pytest.raises(PolicyLoadError):
        parse_policy_sources({"p.yaml": doc(spec)})


def test_a_misspelt_field_is_kept_for_the_webhook_to_name() -> None:
    """The API server keeps it (no pruning, no refusal); the webhook refuses it in the loader's words."""
    text = doc("namespaces: [a]\nsharing: {mdoe: mps}")
    document = yaml.load(text, Loader=goyaml.Loader)
    assert jsonschema.Draft202012Validator(json_schema(openapi_schema())).is_valid(document)
    assert _pruned(copy.deepcopy(document["spec"]), spec_schema()) == document["spec"]
    with pytest.raises(PolicyLoadError, match=r'unknown field .*did you mean "mode"'):
        parse_policy_sources({"p.yaml": text})


def _pruned(value: Any, schema: dict[str, Any]) -> Any:
    """What the API server stores of `value`: unknown fields dropped, except where the schema keeps them."""
    if isinstance(value, dict) and schema.get("type") == "object" and not schema.get(PRESERVE):
        known = schema.get("properties", {})
        return {k: _pruned(v, known[k]) for k, v in value.items() if k in known}
    if isinstance(value, dict):
        known = schema.get("properties", {})
        return {k: _pruned(v, known[k]) if k in known else v for k, v in value.items()}
    if isinstance(value, list) and "items" in schema:
        return [_pruned(item, schema["items"]) for item in value]
    return value


# ------------------------------------------------------------------------------------ a real API server


def _kubectl(kubectl: Path, plane: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl), "--kubeconfig", str(plane.kubeconfig), *args], capture_output=True, text=True, timeout=60
    )


def test_a_real_api_server_serves_the_crd_the_shipped_files_columns_and_status(
    kube_apiserver: Any, kubectl: Path
) -> None:
    """The CRD installed on kube-apiserver (no webhook registered: the schema alone), every shipped policy file
    applied with kubectl, the columns of `kubectl get gpupolicies`, and a status written through the status
    subresource (the server's one write), which a spec update leaves alone."""
    plane = kube_apiserver
    crd_file = ROOT / webhooks.CRD_COPIES[0]
    applied = _kubectl(kubectl, plane, "apply", "--server-side", "-f", str(crd_file))
    assert applied.returncode == 0, applied.stderr
    established = _kubectl(
        kubectl, plane, "wait", "--for=condition=Established", "--timeout=30s", "crd/gpupolicies.gpu-admission.io"
    )
    assert established.returncode == 0, established.stderr
    names = []
    for path in SHIPPED:
        result = _kubectl(kubectl, plane, "apply", "-f", str(path))
        assert result.returncode == 0, f"{path}: {result.stderr}"
        names += [document["metadata"]["name"] for document in _as_kubectl_reads(path)]

    # Misspelt: stored as written (the webhook, not registered here, would refuse it); wrong type: refused.
    misspelt = {"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": "misspelt"},
                "spec": {"namespaces": ["m"], "sharing": {"mdoe": "mps"}}}  # fmt: skip
    base = "/apis/gpu-admission.io/v1/gpupolicies"
    created = plane.request("POST", base, misspelt)
    assert created.status_code == 201, created.text
    assert created.json()["spec"] == misspelt["spec"]
    wrong = {**misspelt, "metadata": {"name": "wrong"}, "spec": {"namespaces": ["w"], "limits": {"maxPerPod": 0}}}
    refused = plane.request("POST", base, wrong)
    assert refused.status_code == 422 and "maxPerPod" in refused.text

    # The status, through its subresource only.
    stored = plane.request("GET", f"{base}/default").json()
    stored["status"] = {
        "observedGeneration": stored["metadata"]["generation"], "mode": "exclusive", "enforcement": "audit",
        "quota": "deny", "matchedNamespaces": 2, "namespaces": ["team-a", "team-b"],
        "conditions": [{"type": READY, "status": "True", "reason": SERVED, "message": "served",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
    }  # fmt: skip
    written = plane.request("PUT", f"{base}/default/status", stored)
    assert written.status_code == 200, written.text
    columns = _kubectl(kubectl, plane, "get", "gpupolicies", "-o", "wide")
    assert columns.returncode == 0, columns.stderr
    header, *rows = columns.stdout.splitlines()
    assert header.split() == ["NAME", "MODE", "ENFORCEMENT", "QUOTA", "NAMESPACES", "READY", "MATCHED", "AGE"]
    assert sorted(row.split()[0] for row in rows) == sorted({*names, "misspelt"})
    (row,) = [row.split() for row in rows if row.split()[0] == "default"]
    assert row[1:4] == ["exclusive", "audit", "deny"] and row[5:7] == ["True", "2"]
    short = _kubectl(kubectl, plane, "get", "gpupol", "default", "-o", "jsonpath={.status.mode}")
    assert short.stdout == "exclusive"

    # A spec update does not touch the status; a status written with the object is ignored.
    current = plane.request("GET", f"{base}/default").json()
    current["status"]["mode"] = "mps"
    current["spec"]["enforcement"] = "warn"
    updated = plane.request("PUT", f"{base}/default", current).json()
    assert updated["status"]["mode"] == "exclusive" and updated["spec"]["enforcement"] == "warn"
    assert updated["metadata"]["generation"] == stored["metadata"]["generation"] + 1
    for name in [*names, "misspelt"]:
        plane.request("DELETE", f"{base}/{name}")
