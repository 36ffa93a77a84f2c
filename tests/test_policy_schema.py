"""The policy files' JSON Schema (schema/gpu-policy.schema.json) against the loader, its source of truth.

The schema is generated from the loader's field tables (webhook/admission/policy/policyfields.py). Checked here:
the file in the repository is the generated one; every field the loader accepts, at every level, is in the
schema (a field added to the loader alone, on any branch, fails here by name); and schema and loader agree on
every policy document of the test suite: each one the loader accepts is valid under the schema, and each one
it refuses is refused by the schema too, but for the problems that only the loader can see (listed below).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.test_policy_loader import SHARED, SPEC_CASES, doc
from webhook.admission.policy import loader, policyfields
from webhook.admission.policy.loader import PolicyLoadError, parse_policy_sources
from webhook.admission.policy.schema import policy_schema, schema_text

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "schema" / "gpu-policy.schema.json"

# What a JSON Schema cannot check, and the loader does (each a fragment of the loader's message).
LOADER_ONLY = (
    "is not a valid namespace name",  # names and globs share one list: a glob's syntax is the loader's
    "is not a valid glob",
    "is not a MIG profile of",  # the profiles of the model named in spec.gpu
    "is not an extended resource name",
    "kubernetes.io domain",
    "would map the GPU to itself",
    "is not a shared GPU resource",
    "duplicate key",  # YAML: a parser keeps one of the two values before any schema sees them
    "is too large",  # YAML integers beyond 64 bits
    "is more than one replica's share",  # memoryFraction against 1/replicas
    "is not in migProfiles",  # migProfile against the profiles listed beside it
)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = policy_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def test_the_schema_file_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "schema/gpu-policy.schema.json is stale: gpu-webhook policy schema > schema/gpu-policy.schema.json"
    )


def _properties(schema: dict[str, Any], path: tuple[str, ...]) -> set[str]:
    for key in path:
        schema = schema["properties"][key]
    assert schema["additionalProperties"] is False, path
    return set(schema["properties"])


@pytest.mark.parametrize(
    ("path", "accepted"),
    [
        ((), "_TOP_FIELDS"),
        (("metadata",), "_METADATA_FIELDS"),
        (("spec",), "_SPEC_FIELDS"),
        (("spec", "sharing"), "_SHARING_FIELDS"),
        (("spec", "gpu"), "_GPU_FIELDS"),
        (("spec", "limits"), "_LIMITS_FIELDS"),
        (("spec", "deviceClasses"), "_DEVICE_CLASSES_FIELDS"),
    ],
)
def test_every_field_the_loader_accepts_is_in_the_schema(path: tuple[str, ...], accepted: str) -> None:
    """A field added to the loader's lists but not to policyfields.py (a merge, a shortcut) fails here."""
    in_loader = set(getattr(loader, accepted))
    in_schema = _properties(policy_schema(), path)
    assert in_loader - in_schema == set(), f"{'.'.join(path) or 'top level'}: the schema lacks these fields"
    assert in_schema - in_loader == set(), f"{'.'.join(path) or 'top level'}: the loader does not accept these"


def test_the_schema_carries_the_loaders_enums_and_bounds() -> None:
    spec = policy_schema()["properties"]["spec"]["properties"]
    assert spec["enforcement"]["enum"] == ["enforce", "warn", "audit"]
    assert spec["fractional"]["enum"] == ["reject", "shared", "mig"]
    assert spec["sharing"]["properties"]["mode"]["enum"] == ["exclusive", "time-slicing", "mps", "mig", "memory"]
    assert spec["sharing"]["properties"]["backend"]["enum"] == ["ack", "hami", "volcano"]
    assert spec["sharing"]["properties"]["placement"]["enum"] == ["binpack", "spread"]
    replicas = spec["sharing"]["properties"]["replicas"]["anyOf"]
    assert replicas == [{"type": "integer", "minimum": 2}, {"enum": ["auto"]}]  # a number, or auto (from the nodes)
    assert spec["limits"]["properties"]["maxPerPod"] == {
        "description": "The most GPUs one pod may hold.", "type": "integer", "minimum": 1, "default": 8,
    }  # fmt: skip
    assert (spec["memoryFraction"]["exclusiveMinimum"], spec["memoryFraction"]["maximum"]) == (0, 1)
    scaling, factor = (
        spec["sharing"]["properties"]["deviceMemoryScaling"],
        spec["sharing"]["properties"]["gpuMemoryFactor"],
    )
    assert (scaling["exclusiveMinimum"], scaling["maximum"], scaling["default"]) == (0, 100, 1)
    assert (factor["type"], factor["minimum"], factor["default"]) == ("integer", 1, 1)
    assert spec["frameworkEnv"]["items"]["enum"] == ["jax", "tensorflow", "cupy", "tgi", "generic", "pytorch"]
    model = spec["gpu"]["properties"]["model"]["anyOf"]
    assert policyfields.lookup("spec.gpu.model").choices == tuple(model[0]["enum"])
    assert model[1] == {"enum": ["auto"]}
    assert spec["cluster"]["properties"]["fits"]["anyOf"] == [
        {"type": "string", "enum": ["deny", "warn", "off"]}, {"enum": [False]},  # YAML 1.1 reads `off` as false
    ]  # fmt: skip


# ------------------------------------------------------------------------------------ agreement on documents


FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _policy_documents_in_the_repository() -> list[tuple[str, str]]:
    """Every GPUPolicy document in a YAML file of the repository (shipped, examples, test fixtures)."""
    found = []
    for path in sorted(ROOT.glob("**/*.y*ml")):
        if any(part.startswith(".") or part in ("build", "node_modules") for part in path.relative_to(ROOT).parts):
            continue
        text = path.read_text()
        try:  # libyaml where installed (the charts and manifests are long); a file it refuses is read again
            documents = list(yaml.load_all(text, Loader=FAST_LOADER))
        except yaml.YAMLError:
            try:
                documents = list(yaml.safe_load_all(text))
            except yaml.YAMLError:
                continue  # broken on purpose (tests/fixtures/cli/broken): the loader's YAML errors, not the schema's
        for index, document in enumerate(documents):
            if isinstance(document, dict) and document.get("kind") == "GPUPolicy":
                found.append((f"{path.relative_to(ROOT)}#{index}", yaml.safe_dump(document)))
    return found


REPOSITORY_DOCUMENTS = _policy_documents_in_the_repository()

# Valid documents beyond the files: every mode with the fields it allows.
VALID_SPECS = [
    "namespaces: [a]",
    "namespaces: ['*', team-a]\nenforcement: audit\nlimits: {maxPerContainer: 1, maxPerPod: 1}",
    SHARED + "memoryFraction: 0.5\nfractional: shared",
    "namespaces: [a]\nsharing: {mode: mps, replicas: 4, resourceName: nvidia.com/gpu.shared}\ngpu: {memoryMiB: 81920}",
    "namespaces: [a]\nsharing: {mode: mps, replicas: 4}\ngpu: {model: A100-80GB}\nmemoryFraction: 0.25",
    "namespaces: [a]\nsharing: {mode: mig, migProfile: 1g.10gb}\ngpu: {model: A100-80GB}\nfractional: mig",
    "namespaces: [a]\nframeworkEnv: [pytorch, jax]\nblockVisibleDevicesOverride: false",
    "namespaces: [a]\nframeworkEnv: []",
    "namespaces: [a]\nsharing: {mode: memory, backend: ack, placement: spread}\ngpu: {model: A100-80GB}",
    "namespaces: [a]\nsharing: {mode: memory, backend: hami, placement: binpack}\ngpu: {memoryMiB: 24576}",
    "namespaces: [a]\nsharing: {mode: memory, backend: volcano}\ngpu: {model: H100-80GB}",
    "namespaces: [a]\nsharing: {mode: memory, backend: volcano, gpuMemoryFactor: 10}\ngpu: {model: H100-80GB}",
    "namespaces: [a]\nsharing: {mode: memory, backend: hami, deviceMemoryScaling: 1.5}\ngpu: {model: A100-80GB}",
]


def _loads(text: str) -> bool:
    try:
        parse_policy_sources({"p.yaml": text})
    except PolicyLoadError:
        return False
    return True


def _schema_accepts(validator: jsonschema.Draft202012Validator, text: str) -> bool:
    return validator.is_valid(yaml.safe_load(text))


@pytest.mark.parametrize(("source", "text"), REPOSITORY_DOCUMENTS, ids=[s for s, _ in REPOSITORY_DOCUMENTS])
def test_schema_and_loader_agree_on_every_policy_file_in_the_repository(validator, source: str, text: str) -> None:
    assert _schema_accepts(validator, text) == _loads(text), source


@pytest.mark.parametrize("spec", VALID_SPECS)
def test_what_the_loader_accepts_the_schema_accepts(validator, spec: str) -> None:
    assert _loads(doc(spec)), spec
    errors = [error.message for error in validator.iter_errors(yaml.safe_load(doc(spec)))]
    assert errors == [], spec


@pytest.mark.parametrize(("spec", "line"), SPEC_CASES, ids=[line.split(":")[0] for _, line in SPEC_CASES])
def test_what_the_loader_refuses_the_schema_refuses(validator, spec: str, line: str) -> None:
    """Every invalid spec of the loader's tests: refused by the schema, unless only the loader can tell."""
    assert not _loads(doc(spec))
    try:
        document = yaml.safe_load(doc(spec))
    except yaml.YAMLError:
        pytest.skip("not YAML that a schema could see")
    if any(fragment in line for fragment in LOADER_ONLY):
        return
    assert not validator.is_valid(json.loads(json.dumps(document, default=str))), line
