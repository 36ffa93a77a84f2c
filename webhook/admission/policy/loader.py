"""Namespace policy files -> an immutable, validated `PolicySet`, or one error listing every problem.

Each problem is one line, `<file>#<document> <field.path>: <message>`, naming the value, the rule and the fix.
Unknown fields are errors at every level: a typo must never silently turn a rule off. Hostile input fails
fast: files over 1 MiB are refused before parsing; YAML aliases (the "billion laughs" bomb) and deep nesting
are refused while parsing, at the first offending event.

`memoryFraction` is exact: the YAML number's text becomes a `Fraction` (0.1 is 1/10, not a float).
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Final, Literal, TypedDict, TypeVar

from webhook.admission.base.quantity import format_fraction
from webhook.admission.base.resources import GPU_MODELS, NVIDIA_GPU, is_managed, is_mig_profile_name, is_shared
from webhook.admission.policy import policyfields
from webhook.admission.policy.globs import is_glob, is_namespace_name, parse_glob
from webhook.admission.policy.model import (
    DEFAULT_FRAMEWORK_ENV,
    DEFAULT_MAX_PER_POD,
    DEFAULT_SHARED_RESOURCE,
    FRAMEWORKS,
    GPU,
    AssumedNode,
    Backend,
    Check,
    ClusterChecks,
    DeviceClasses,
    Enforcement,
    Fractional,
    Isolation,
    Limits,
    MigStrategy,
    Mode,
    Placement,
    Policy,
    PolicySet,
    Sharing,
    Steering,
)
from webhook.admission.policy.yamlreader import MAX_DEPTH as MAX_DEPTH  # re-exported: the limits a policy file meets
from webhook.admission.policy.yamlreader import MAX_EVENTS as MAX_EVENTS
from webhook.admission.policy.yamlreader import (
    TAG,
    Invalid,
    Scalar,
    describe,
    join_path,
    quote_value,
    read_documents,
    shorten,
)

API_VERSION = policyfields.API_VERSION
KIND = policyfields.KIND
MAX_FILE_BYTES = 1024 * 1024  # the most a ConfigMap holds; real policy files are a few KiB
MAX_PROBLEMS_PER_FILE = 100
MAX_GLOB_LENGTH = 253
POLICY_SUFFIXES = (".yaml", ".yml")
# The modes that hand out replicas of one GPU (the device plugin's `.shared` resource): replicas, resourceName
# and memoryFraction apply under them only. The loader's own reading of the modes (the sharing backends, above
# it, answer everything else about a mode).
SHARED_MODES: Final = (Mode.TIME_SLICING, Mode.MPS)
# spec.sharing's keys that apply under mode memory only
_MEMORY_ONLY = ("backend", "placement", "isolation", "gpuMemoryFactor", "deviceMemoryScaling")


_DNS_SUBDOMAIN = re.compile(policyfields.DNS_SUBDOMAIN)
_RESOURCE_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DECIMAL = re.compile(r"^[-+]?(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?$")
_NAMESPACE_RULE = (
    "namespace names are 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit"
)


class PolicyLoadError(Exception):
    """Every problem in a policy directory, one line each (`str()` joins them)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: list[str] = list(problems)
        super().__init__("\n".join(self.problems))


# --- Public entry points -----------------------------------------------------------------------------------


def load_policies(directory: str | os.PathLike[str]) -> PolicySet:
    """The policies in `*.yaml`/`*.yml` files directly in `directory`, in file-name then document order.

    Symlinks are followed (a Kubernetes ConfigMap volume is a set of them); hidden entries such as the
    ConfigMap's `..data` are skipped. Files are named in messages as `directory` was given, joined with
    the file name (`policies/mig.yaml#1`).
    """
    label = os.fspath(directory)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        raise PolicyLoadError(
            [f"{label}: no such policy directory; create it, or name the directory that holds the policy files"]
        ) from None
    except NotADirectoryError:
        raise PolicyLoadError([f"{label}: not a directory; policies are *.yaml files in a directory"]) from None
    except OSError as exc:
        raise PolicyLoadError([f"{label}: cannot read the policy directory: {exc.strerror}"]) from None
    sources: list[tuple[str, str | _Unreadable]] = []
    for name in names:
        if name.startswith(".") or not name.endswith(POLICY_SUFFIXES):
            continue
        sources.append((os.path.join(label, name), _read_file(os.path.join(directory, name))))
    return _build(sources)


def parse_policy_sources(sources: Mapping[str, str]) -> PolicySet:
    """The policies in `sources` (file name -> YAML text), in file-name then document order. Pure."""
    return _build(sorted(sources.items()))


# --- Reading files -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Unreadable:
    message: str


def _too_large(size: int) -> _Unreadable:
    return _Unreadable(
        f"{size} bytes is larger than the 1 MiB limit for a policy file; policy files are small: split or trim it"
    )


def _read_file(path: str) -> str | _Unreadable:
    try:
        info = os.stat(path)  # follows symlinks; checked before open() so a FIFO cannot block us
        if not stat.S_ISREG(info.st_mode):
            return _Unreadable("not a regular file; a policy file must be a plain YAML file")
        if info.st_size > MAX_FILE_BYTES:
            return _too_large(info.st_size)
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return _Unreadable("cannot read: no such file (a broken symlink?)")
    except OSError as exc:
        return _Unreadable(f"cannot read: {exc.strerror}")
    if len(data) > MAX_FILE_BYTES:
        return _too_large(len(data))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _Unreadable(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save the file as UTF-8"
        )


# --- Messages ----------------------------------------------------------------------------------------------


def _suggest(word: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    folded = {choice.lower(): choice for choice in choices}
    match = folded.get(word.lower()) or next(iter(difflib.get_close_matches(word, choices, 1, 0.6)), None)
    return f'did you mean "{match}"?' if match else ""


def _one_of(value: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    hint = _suggest(value, choices)
    return f"{quote_value(value)} is not one of {', '.join(choices)}" + (f" ({hint})" if hint else "")


# --- Validation: one document -> a Policy -------------------------------------------------------------------


class _Marker(enum.Enum):
    """What a field holds when it yields no value: typed, so that the checker sees every place a value may be
    missing or invalid."""

    ABSENT = "absent"  # not written
    BAD = "bad"  # present but invalid: already reported


_ABSENT: Final = _Marker.ABSENT
_BAD: Final = _Marker.BAD
_Absent = Literal[_Marker.ABSENT]
_Bad = Literal[_Marker.BAD]
_T = TypeVar("_T")
_D = TypeVar("_D")
_E = TypeVar("_E", bound=enum.Enum)


def _valid(value: _T | _Bad) -> _T:
    """A value once the document has no problems: every _BAD was reported, so none is left."""
    if value is _BAD:
        raise AssertionError("a value reported as invalid reached a policy")
    return value


def _given(value: _T | _Absent | _Bad, default: _D) -> _T | _D:
    """`_valid(value)`, or `default` where the field was not written."""
    return default if value is _ABSENT else _valid(value)


# The field tables live in policyfields.py, which the JSON Schema is generated from as well.
_TOP_FIELDS = policyfields.names(policyfields.DOCUMENT)
_METADATA_FIELDS = policyfields.names(policyfields.METADATA)
_SPEC_FIELDS = policyfields.names(policyfields.SPEC)
_SHARING_FIELDS = policyfields.names(policyfields.SHARING)
_GPU_FIELDS = policyfields.names(policyfields.GPU)
_LIMITS_FIELDS = policyfields.names(policyfields.LIMITS)
_CLUSTER_FIELDS = policyfields.names(policyfields.CLUSTER)
_NODE_SHAPE_FIELDS = policyfields.names(policyfields.NODE_SHAPE)
_DEVICE_CLASSES_FIELDS = policyfields.names(policyfields.DEVICE_CLASSES)
AUTO = "auto"  # sharing.replicas and gpu.model: taken from the nodes (cluster-aware admission)


@dataclass
class _Parsed:
    """What one document yielded: its policy if valid, and its name and namespaces for set-wide checks."""

    source: str
    name: str | None = None
    namespaces: list[tuple[int, str]] = field(default_factory=list)
    policy: Policy | None = None
    steering: Steering = Steering.AUTO  # as written: resolved for the whole set (`_resolve_steering`)


class _DocumentChecker:
    """Validates one document, collecting `(path, message)` problems."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems

    def problem(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def expected(self, path: str, value: Any, message: str) -> None:
        """`value` has the wrong type or shape: a problem, unless it is a scalar that its own YAML tag refused
        (`!!int abc`), which reading already reported at this path."""
        if not isinstance(value, Invalid):
            self.problem(path, message)

    def mapping(self, value: Any, path: str, known: tuple[str, ...]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.expected(path, value, f"expected a mapping of {', '.join(known)}; got {describe(value)}")
            return None
        for key in value:
            if key not in known:
                hint = _suggest(key, known) or "known fields: " + ", ".join(known)
                self.problem(join_path(path, key), f"unknown field ({hint})")
        return value

    def section(self, parent: dict[str, Any], key: str, path: str, known: tuple[str, ...]) -> dict[str, Any]:
        """An optional sub-mapping; {} when absent or invalid (its problems are reported)."""
        if key not in parent:
            return {}
        return self.mapping(parent[key], join_path(path, key), known) or {}

    def string(self, value: Any, path: str, what: str = "a string") -> str | _Bad:
        if isinstance(value, str):
            return value
        self.expected(path, value, f"expected {what}, got {describe(value)}")
        return _BAD

    def enum(self, parent: dict[str, Any], key: str, path: str, kind: type[_E], default: _D) -> _E | _D | _Bad:
        if key not in parent:
            return default
        path = join_path(path, key)
        choices = [member.value for member in kind]
        value = self.string(parent[key], path, "one of " + ", ".join(choices))
        if value is _BAD:
            return _BAD
        if value not in choices:
            self.problem(path, _one_of(value, choices))
            return _BAD
        return kind(value)

    def integer(self, parent: dict[str, Any], key: str, path: str, minimum: int, rule: str) -> int | _Absent | _Bad:
        if key not in parent:
            return _ABSENT
        path, value = join_path(path, key), parent[key]
        if isinstance(value, bool) or not isinstance(value, int | Scalar):
            self.expected(path, value, f"expected a whole number, got {describe(value)}")
            return _BAD
        if isinstance(value, Scalar):
            if value.tag == TAG + "int":
                self.problem(path, f"{shorten(value.text, 30)} is too large; {rule}")
            else:
                self.problem(path, f"expected a whole number, got {describe(value)}")
            return _BAD
        if value < minimum:
            self.problem(path, f"{value} is too small; {rule}")
            return _BAD
        return value

    def boolean(self, parent: dict[str, Any], key: str, path: str, default: bool) -> bool | _Bad:
        if key not in parent:
            return default
        if isinstance(value := parent[key], bool):
            return value
        self.expected(join_path(path, key), value, f"expected true or false, got {describe(value)}")
        return _BAD

    def fraction(self, parent: dict[str, Any], key: str, path: str) -> Fraction | _Bad | None:
        """A number in (0, 1], exactly as written."""
        rule = "a share of the GPU's memory is greater than 0 and at most 1, e.g. 0.25"
        return self.number(parent, key, path, Fraction(1), rule)

    def number(self, parent: dict[str, Any], key: str, path: str, most: Fraction, rule: str) -> Fraction | _Bad | None:
        """A number in (0, most], exactly as written."""
        if key not in parent:
            return None
        path, value = join_path(path, key), parent[key]
        exact = _exact_number(value)
        if exact is None:
            self.expected(path, value, f"expected a number, got {describe(value)}; {rule}")
            return _BAD
        if not 0 < exact <= most:
            shown = value.text if isinstance(value, Scalar) else str(value)
            self.problem(path, f"{shorten(shown, 30)} is out of range; {rule}")
            return _BAD
        return exact


def _exact_number(value: Any) -> Fraction | None:
    """An int, or a YAML decimal's text as an exact Fraction (None for anything else, .inf and .nan)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if not isinstance(value, Scalar) or value.tag not in (TAG + "float", TAG + "int"):
        return None
    text = value.text.replace("_", "")
    match = _DECIMAL.match(text)
    if match is None or not (match[1] or match[2]):
        return None
    if len(text) > 64 or (match[3] is not None and len(match[3].lstrip("+-")) > 3):
        return Fraction(2)  # absurd (1e999999999 would take forever exactly): out of range, quoted as written
    return Fraction(text)


def _check_resource_name(name: str) -> str | None:
    """Why `name` is not a Kubernetes extended resource name, or None."""
    prefix, slash, rest = name.partition("/")
    rule = "use <domain>/<name>, e.g. nvidia.com/gpu.shared"
    if not slash or not _is_dns(prefix):
        return f"{quote_value(name)} is not an extended resource name; {rule}"
    if not _RESOURCE_NAME_PART.match(rest) or len(rest) > 63:
        return f"{quote_value(name)} is not an extended resource name; {rule}"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return f"{quote_value(name)} is in the kubernetes.io domain, which extended resources may not use; {rule}"
    if name == NVIDIA_GPU:
        return None  # the device plugin's default (renameByDefault: false): replicas keep the GPU's name
    if not (is_managed(name) and is_shared(name)):  # the rules, mentions_gpu and the matchConditions know these
        return (
            f"{quote_value(name)} is not a shared GPU resource that the webhook checks; use nvidia.com/gpu.shared (the "
            "device plugin's name with renameByDefault: true) or nvidia.com/mig-<profile>.shared"
        )
    return None


def _parse_document(value: Any, source: str, problems: list[tuple[str, str]]) -> _Parsed:
    """Validate one document, section by section in the order the problems are reported; a Policy only when
    it has no problems."""
    parsed = _Parsed(source)
    check = _DocumentChecker(problems)
    if not isinstance(value, dict):
        check.expected(
            "", value, f"a policy document must be a mapping with {', '.join(_TOP_FIELDS)}; got {describe(value)}"
        )
        return parsed
    check.mapping(value, "", _TOP_FIELDS)
    _check_type(value, check)
    parsed.name = _parse_metadata(value, check)
    if "spec" not in value:
        check.problem("spec", "required; a policy needs at least spec.namespaces")
        return parsed
    spec = check.mapping(value["spec"], "spec", _SPEC_FIELDS)
    if spec is None:
        return parsed
    parsed.namespaces = _parse_namespaces(spec, check)
    enforcement = check.enum(spec, "enforcement", "spec", Enforcement, Enforcement.ENFORCE)
    fractional = check.enum(spec, "fractional", "spec", Fractional, Fractional.REJECT)
    sharing_map = check.section(spec, "sharing", "spec", _SHARING_FIELDS)
    gpu_map = check.section(spec, "gpu", "spec", _GPU_FIELDS)
    limits_map = check.section(spec, "limits", "spec", _LIMITS_FIELDS)
    model, memory_mib, auto_model = _parse_gpu(gpu_map, check)
    auto_replicas = sharing_map.get("replicas") == AUTO
    mode, sharing = _parse_sharing(sharing_map, model, check, auto_replicas)
    _check_modes_agree(spec, mode, fractional, model, memory_mib, auto_model, check)
    max_container, max_pod = _parse_limits(limits_map, check)
    memory_fraction = _parse_memory_fraction(spec, mode, sharing, check)
    framework_env = _parse_frameworks(spec, check)
    block = check.boolean(spec, "blockVisibleDevicesOverride", "spec", True)
    trusted = _parse_trusted_schedulers(spec, check)
    steering = _parse_steering(spec, check)
    cluster = _parse_cluster(check.section(spec, "cluster", "spec", _CLUSTER_FIELDS), check)
    device_classes = _parse_device_class_lists(spec, check)

    if problems or parsed.name is None or sharing is None:
        return parsed
    parsed.policy = Policy(
        name=parsed.name,
        namespaces=tuple(pattern for _, pattern in parsed.namespaces),
        enforcement=_valid(enforcement),
        sharing=sharing,
        gpu=GPU(
            model=_given(model, None),
            memory_mib=_given(memory_mib, None),
        ),
        limits=Limits(
            max_per_container=_given(max_container, None),
            max_per_pod=_given(max_pod, DEFAULT_MAX_PER_POD),
        ),
        fractional=_valid(fractional),
        memory_fraction=_valid(memory_fraction),
        framework_env=framework_env,
        block_visible_devices_override=_valid(block),
        trusted_schedulers=trusted,
        cluster_checks=ClusterChecks(
            fits=_valid(cluster["fits"]),
            offered=_valid(cluster["offered"]),
            drift=_valid(cluster["drift"]),
            quota=_valid(cluster["quota"]),
            assume_nodes=cluster["assumeNodes"],
            auto_replicas=auto_replicas,
            auto_model=auto_model,
        ),
        device_classes=device_classes,
        source=source,
    )
    parsed.steering = _valid(steering)
    return parsed


def _check_type(document: dict[str, Any], check: _DocumentChecker) -> None:
    """apiVersion and kind: required, and this webhook's."""
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if key not in document:
            check.problem(key, f"required; set it to {expected}")
        elif check.string(document[key], key) is not _BAD and document[key] != expected:
            check.problem(key, f"{quote_value(document[key])} is not supported; use {expected}")


def _parse_metadata(document: dict[str, Any], check: _DocumentChecker) -> str | None:
    """metadata.name, when it is a valid name."""
    if "metadata" not in document:
        check.problem("metadata.name", "required; give the policy a unique name")
        return None
    metadata = check.mapping(document["metadata"], "metadata", _METADATA_FIELDS)
    if metadata is None:
        return None
    if "name" not in metadata:
        check.problem("metadata.name", "required; give the policy a unique name")
        return None
    name = check.string(metadata["name"], "metadata.name")
    if name is _BAD:
        return None
    if not _is_dns(name):
        check.problem(
            "metadata.name",
            f"{quote_value(name)} is not a valid name; use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit",
        )
        return None
    return name


def _parse_gpu(gpu: dict[str, Any], check: _DocumentChecker) -> tuple[str | _Absent | _Bad, int | _Absent | _Bad, bool]:
    """spec.gpu: the model, the memory in MiB, and whether the model is `auto` (taken from the nodes)."""
    model: str | _Absent | _Bad = _ABSENT
    auto_model = gpu.get("model") == AUTO
    if auto_model:
        pass  # resolved per inventory snapshot (policynodes.resolve); unknown offline
    elif "model" in gpu:
        model = check.string(gpu["model"], "spec.gpu.model")
        if model is not _BAD and model not in GPU_MODELS:
            hint = _suggest(model, GPU_MODELS)
            check.problem(
                "spec.gpu.model",
                f"{quote_value(model)} is not a known GPU model (known: {', '.join(GPU_MODELS)})"
                + (f"; {hint}" if hint else "; or leave it out and give gpu.memoryMiB"),
            )
            model = _BAD
    memory_mib = check.integer(
        gpu,
        "memoryMiB",
        "spec.gpu",
        policyfields.minimum("spec.gpu.memoryMiB"),
        "the GPU's memory in MiB is at least 1",
    )
    return model, memory_mib, auto_model


def _check_modes_agree(
    spec: dict[str, Any],
    mode: Mode | _Bad,
    fractional: Fractional | _Bad,
    model: str | _Absent | _Bad,
    memory_mib: int | _Absent | _Bad,
    auto_model: bool,
    check: _DocumentChecker,
) -> None:
    """What sharing.mode and spec.fractional need of each other and of spec.gpu."""
    if mode is Mode.MPS and model is _ABSENT and memory_mib is _ABSENT and not auto_model:
        check.problem(
            "spec.gpu",
            "mps mode needs gpu.model or gpu.memoryMiB: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is a share of the "
            "GPU's memory; add one",
        )
    if mode is Mode.MEMORY and model is _ABSENT and memory_mib is _ABSENT and not auto_model:
        check.problem(
            "spec.gpu",
            "memory mode needs gpu.model or gpu.memoryMiB: a fraction of a GPU becomes that share of its memory; "
            "add one",
        )
    if mode is Mode.MEMORY and "fractional" in spec:
        check.problem(
            "spec.fractional",
            "does not apply when mode is memory: every fraction becomes the backend's share of the GPU's memory; "
            "remove it",
        )
    if fractional is Fractional.MIG and model is _ABSENT and not auto_model:
        check.problem(
            "spec.fractional",
            "mig needs spec.gpu.model to pick the smallest MIG profile that holds the fraction; set gpu.model",
        )
    if fractional is Fractional.SHARED and mode in (Mode.EXCLUSIVE, Mode.MIG):
        check.problem(
            "spec.fractional",
            f"shared turns a fraction into 1 shared GPU, which needs sharing.mode time-slicing or mps (mode is "
            f"{mode}); use reject or mig, or change the mode",
        )


def _mode_is(modes: list[str]) -> dict[str, Any]:
    """spec.sharing.mode is one of `modes` (an absent mode is exclusive)."""
    condition: dict[str, Any] = {"properties": {"mode": {"enum": modes}}, "required": ["mode"]}
    return {"properties": {"sharing": condition}, "required": ["sharing"]}


def spec_rules_schema() -> list[dict[str, Any]]:
    """The rules between spec's fields as JSON Schema (schema.py's `allOf` under spec): those that
    `_check_modes_agree`, `_parse_sharing`, `_parse_memory` and `_parse_memory_fraction` check, written next to
    them so that one change updates both."""
    shared = [mode.value for mode in SHARED_MODES]
    return [
        {  # time-slicing and mps need replicas; replicas, resourceName and memoryFraction apply only there
            "if": _mode_is(shared),
            "then": {"properties": {"sharing": {"required": ["replicas"]}}},
            "else": {
                "properties": {
                    "sharing": {"not": {"anyOf": [{"required": ["replicas"]}, {"required": ["resourceName"]}]}}
                },
                "not": {"required": ["memoryFraction"]},
            },
        },
        {  # mig needs migProfile, which applies only there, as migProfiles does
            "if": _mode_is([Mode.MIG.value]),
            "then": {"properties": {"sharing": {"required": ["migProfile"]}}},
            "else": {
                "properties": {
                    "sharing": {"not": {"anyOf": [{"required": ["migProfile"]}, {"required": ["migProfiles"]}]}}
                }
            },
        },
        {  # mps sets a memory limit from the GPU's memory: a model or memoryMiB
            "if": _mode_is([Mode.MPS.value]),
            "then": {
                "required": ["gpu"],
                "properties": {"gpu": {"anyOf": [{"required": ["model"]}, {"required": ["memoryMiB"]}]}},
            },
        },
        {  # memory needs a backend and the GPU's memory, and no fractional; backend, placement and isolation (ack)
            # apply only there
            "if": _mode_is([Mode.MEMORY.value]),
            "then": {
                "required": ["gpu"],
                "properties": {
                    "sharing": {
                        "required": ["backend"],
                        "not": {
                            "anyOf": [
                                {"properties": {"backend": {"const": "volcano"}}, "required": ["backend", "placement"]},
                                {
                                    "properties": {"backend": {"enum": ["hami", "volcano"]}},
                                    "required": ["backend", "isolation"],
                                },
                            ]
                        },
                    },
                    "gpu": {"anyOf": [{"required": ["model"]}, {"required": ["memoryMiB"]}]},
                },
                "not": {"required": ["fractional"]},
            },
            "else": {"properties": {"sharing": {"not": {"anyOf": [{"required": [key]} for key in _MEMORY_ONLY]}}}},
        },
        *(
            {  # each backend's own memory unit applies under that backend only
                "if": {"properties": {"sharing": {"required": [key]}}, "required": ["sharing"]},
                "then": {
                    "properties": {"sharing": {"properties": {"backend": {"const": backend}}, "required": ["backend"]}}
                },
            }
            for key, backend in (("gpuMemoryFactor", "volcano"), ("deviceMemoryScaling", "hami"))
        ),
        {  # fractional: mig picks a profile of the named model
            "if": {"properties": {"fractional": {"const": Fractional.MIG.value}}, "required": ["fractional"]},
            "then": {"required": ["gpu"], "properties": {"gpu": {"required": ["model"]}}},
        },
        {  # fractional: shared turns a fraction into one shared replica
            "if": {"properties": {"fractional": {"const": Fractional.SHARED.value}}, "required": ["fractional"]},
            "then": _mode_is(shared),
        },
    ]


def _parse_limits(limits: dict[str, Any], check: _DocumentChecker) -> tuple[int | _Absent | _Bad, int | _Absent | _Bad]:
    """spec.limits: the most GPUs per container and per pod."""
    max_container = check.integer(
        limits,
        "maxPerContainer",
        "spec.limits",
        policyfields.minimum("spec.limits.maxPerContainer"),
        "a container may hold at least 1 GPU",
    )
    max_pod = check.integer(
        limits,
        "maxPerPod",
        "spec.limits",
        policyfields.minimum("spec.limits.maxPerPod"),
        "a pod may hold at least 1 GPU",
    )
    return max_container, max_pod


def _parse_memory_fraction(
    spec: dict[str, Any], mode: Mode | _Bad, sharing: Sharing | None, check: _DocumentChecker
) -> Fraction | _Bad | None:
    """spec.memoryFraction: a time-sliced or MPS replica's share of the GPU's memory, at most 1/replicas."""
    if "memoryFraction" in spec and mode is not _BAD and mode not in SHARED_MODES:
        check.problem(
            "spec.memoryFraction", f"only applies when mode is time-slicing or mps (mode is {mode}); remove it"
        )
        return None
    memory_fraction = check.fraction(spec, "memoryFraction", "spec")
    replicas = sharing.replicas if sharing is not None else None
    if memory_fraction not in (None, _BAD) and replicas and memory_fraction > Fraction(1, replicas):
        check.problem(
            "spec.memoryFraction",
            f"{format_fraction(memory_fraction)} is more than one replica's share (1/{replicas} of a GPU): "
            f"{replicas} containers share each GPU, so every GPU would be overcommitted; set at most "
            f"{format_fraction(Fraction(1, replicas))}",
        )
        return _BAD
    return memory_fraction


def _parse_device_class_lists(spec: dict[str, Any], check: _DocumentChecker) -> DeviceClasses:
    """spec.deviceClasses: the DRA classes of whole GPUs and of MIG devices, each class in one list."""
    classes = check.section(spec, "deviceClasses", "spec", _DEVICE_CLASSES_FIELDS)
    device_classes = DeviceClasses(
        gpu=_parse_device_classes(classes, "gpu", check), mig=_parse_device_classes(classes, "mig", check)
    )
    if set(device_classes.gpu_classes) & set(device_classes.mig_classes):
        both = sorted(set(device_classes.gpu_classes) & set(device_classes.mig_classes))
        check.problem(
            "spec.deviceClasses",
            f"{', '.join(both)} listed as both whole GPUs and MIG devices; keep each class in one list",
        )
    return device_classes


def _parse_namespaces(spec: dict[str, Any], check: _DocumentChecker) -> list[tuple[int, str]]:
    """The valid entries of spec.namespaces, with their index (for messages)."""
    path = "spec.namespaces"
    if "namespaces" not in spec:
        check.problem(path, 'required; list the namespaces or globs this policy applies to, e.g. ["team-a", "ml-*"]')
        return []
    entries = spec["namespaces"]
    if isinstance(entries, str):
        got = describe(entries)
        check.problem(path, f"expected a list of namespaces or globs, got {got}; write [{quote_value(entries)}]")
        return []
    if not isinstance(entries, list):
        check.expected(path, entries, f"expected a list of namespaces or globs, got {describe(entries)}")
        return []
    if not entries:
        check.problem(path, 'empty; list at least one namespace or glob ("*" for every namespace)')
    valid: list[tuple[int, str]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{path}[{index}]"
        if check.string(entry, where, "a namespace name or glob") is _BAD:
            continue
        if entry in seen:
            check.problem(where, f"{quote_value(entry)} is listed twice in this policy; remove one")
            continue
        seen.add(entry)
        if is_glob(entry):
            try:
                if len(entry) > MAX_GLOB_LENGTH:
                    raise ValueError(f"is longer than {MAX_GLOB_LENGTH} characters")
                parse_glob(entry)
            except ValueError as exc:
                check.problem(where, f"{quote_value(entry)} is not a valid glob: it {exc}")
                continue
        elif not is_namespace_name(entry):
            check.problem(where, f"{quote_value(entry)} is not a valid namespace name; {_NAMESPACE_RULE}")
            continue
        valid.append((index, entry))
    return valid


def _parse_sharing(
    sharing: dict[str, Any], model: Any, check: _DocumentChecker, auto_replicas: bool = False
) -> tuple[Mode | _Bad, Sharing | None]:
    """spec.sharing's mode (or _BAD), and the whole section with the fields that mode needs and only those
    (None when invalid: reported). `replicas: auto` leaves the replicas unknown until the nodes say."""
    path = "spec.sharing"
    mode = check.enum(sharing, "mode", path, Mode, Mode.EXCLUSIVE)
    if mode is _BAD:
        return mode, None
    ok = True
    replicas: int | _Absent | _Bad = _ABSENT
    if not auto_replicas:
        rule = "time-slicing and mps share each GPU as at least 2 replicas"
        replicas = check.integer(sharing, "replicas", path, policyfields.minimum("spec.sharing.replicas"), rule)
    ok &= replicas is not _BAD
    if mode in SHARED_MODES and replicas is _ABSENT and not auto_replicas:
        check.problem(
            f"{path}.replicas", f"required when mode is {mode}; set the device plugin's replicas per GPU (>= 2)"
        )
        ok = False
    for key, modes in (("replicas", "time-slicing or mps"), ("resourceName", "time-slicing or mps")):
        if key in sharing and mode not in SHARED_MODES:
            check.problem(f"{path}.{key}", f"only applies when mode is {modes} (mode is {mode}); remove it")
            ok = False
    resource_name: str | _Bad = DEFAULT_SHARED_RESOURCE
    if "resourceName" in sharing and mode in SHARED_MODES:
        resource_name = check.string(sharing["resourceName"], f"{path}.resourceName")
        if resource_name is not _BAD and (why := _check_resource_name(resource_name)):
            check.problem(f"{path}.resourceName", why)
            resource_name = _BAD
        ok &= resource_name is not _BAD

    strategy: MigStrategy | _Bad = MigStrategy.MIXED
    if "migStrategy" in sharing and mode is not Mode.MIG:
        check.problem(f"{path}.migStrategy", f"only applies when mode is mig (mode is {mode}); remove it")
        ok = False
    else:
        strategy = check.enum(sharing, "migStrategy", path, MigStrategy, MigStrategy.MIXED)
        ok &= strategy is not _BAD
    profile: str | _Bad | None = None
    if "migProfile" in sharing and mode is not Mode.MIG:
        check.problem(f"{path}.migProfile", f"only applies when mode is mig (mode is {mode}); remove it")
        ok = False
    elif mode is Mode.MIG:
        gpu = GPU_MODELS.get(model) if isinstance(model, str) else None
        example = f"one of {', '.join(gpu.profile_names())}" if gpu else "e.g. 1g.10gb"
        if "migProfile" not in sharing:
            check.problem(
                f"{path}.migProfile", f"required when mode is mig; name the profile one GPU becomes, {example}"
            )
            return mode, None
        profile = check.string(sharing["migProfile"], f"{path}.migProfile")
        if profile is _BAD:
            return mode, None
        if gpu is not None and gpu.profile(profile) is None:
            check.problem(
                f"{path}.migProfile",
                f"{quote_value(profile)} is not a MIG profile of {gpu.name} (valid: {', '.join(gpu.profile_names())})",
            )
            return mode, None
        if not is_mig_profile_name(profile):
            check.problem(
                f"{path}.migProfile",
                f"{quote_value(profile)} is not a MIG profile name; use <slices>g.<memory>gb[+me], {example}",
            )
            return mode, None
    offered = _parse_mig_profiles(sharing, mode, model, _valid(profile), check)
    backend, placement, isolation = _parse_memory(sharing, mode, check)
    factor, scaling = _parse_memory_units(sharing, backend, check)
    if not ok or offered is _BAD or _BAD in (backend, placement, isolation, factor, scaling):
        return mode, None
    return mode, Sharing(
        mode=mode,
        replicas=_given(replicas, None),
        resource_name=_valid(resource_name),
        mig_profile=_valid(profile),
        mig_profiles=offered,
        mig_strategy=_valid(strategy),
        backend=backend,
        placement=placement,
        isolation=isolation,
        gpu_memory_factor=_valid(factor),
        device_memory_scaling=_valid(scaling),
    )


def _parse_memory(sharing: dict[str, Any], mode: Mode, check: _DocumentChecker) -> tuple[Any, Any, Any]:
    """spec.sharing.backend (required under memory), placement and isolation (optional, isolation under ack
    only): each None where absent, _BAD where invalid (reported)."""
    path = "spec.sharing"
    if mode is not Mode.MEMORY:
        bad = False
        for key in ("backend", "placement", "isolation"):
            if key in sharing:
                check.problem(f"{path}.{key}", f"only applies when mode is memory (mode is {mode}); remove it")
                bad = True
        return (_BAD, _BAD, _BAD) if bad else (None, None, None)
    if "backend" not in sharing:
        check.problem(
            f"{path}.backend",
            "required when mode is memory; name the device plugin that slices the GPU's memory: ack, hami or volcano",
        )
        return _BAD, _BAD, _BAD
    backend = check.enum(sharing, "backend", path, Backend, None)
    placement = check.enum(sharing, "placement", path, Placement, None)
    isolation = check.enum(sharing, "isolation", path, Isolation, None)
    if backend in (Backend.HAMI, Backend.VOLCANO) and isolation not in (None, _BAD):
        check.problem(
            f"{path}.isolation",
            f"applies only to backend ack, whose node pools differ in it (ack.node.gpu.schedule); {backend}'s "
            "vGPUs always cap the memory a container sees; remove it",
        )
        isolation = _BAD
    if backend is Backend.VOLCANO and placement not in (None, _BAD):
        check.problem(
            f"{path}.placement",
            "Volcano reads binpack or spread only from its scheduler's configuration (the deviceshare plugin's "
            "deviceshare.SchedulePolicy), for every pod alike; set it there and remove placement",
        )
        placement = _BAD
    return backend, placement, isolation


# Where each backend's own memory unit is set, and the device plugin config that holds it.
_MEMORY_UNITS = {
    "gpuMemoryFactor": (Backend.VOLCANO, "the Volcano vGPU device plugin's gpuMemoryFactor"),
    "deviceMemoryScaling": (Backend.HAMI, "HAMi's deviceMemoryScaling"),
}


def _parse_memory_units(sharing: dict[str, Any], backend: Any, check: _DocumentChecker) -> tuple[Any, Any]:
    """spec.sharing.gpuMemoryFactor (volcano) and deviceMemoryScaling (hami): each its default where absent,
    _BAD where invalid or under another backend (reported)."""
    path = "spec.sharing"
    bad = False
    for key, (owner, what) in _MEMORY_UNITS.items():
        if key in sharing and backend is not owner and backend is not _BAD:
            where = f"backend is {backend}" if backend is not None else "mode is not memory"
            why = f"is {what}: it only applies when backend is {owner} ({where})"
            if key == "deviceMemoryScaling" and backend is Backend.VOLCANO:
                why += "; the Volcano vGPU device plugin registers each GPU's memory unscaled, whatever its own"
            check.problem(f"{path}.{key}", f"{why}; remove it")
            bad = True
    if bad:
        return _BAD, _BAD
    factor = check.integer(
        sharing, "gpuMemoryFactor", path, policyfields.minimum("spec.sharing.gpuMemoryFactor"),
        "one unit of volcano.sh/vgpu-memory is at least 1 MiB (the device plugin's gpuMemoryFactor, default 1)",
    )  # fmt: skip
    most = policyfields.lookup("spec.sharing.deviceMemoryScaling").at_most
    assert most is not None
    rule = f"HAMi registers each GPU's memory times this: greater than 0 and at most {most} (default 1)"
    scaling = check.number(sharing, "deviceMemoryScaling", path, most, rule)
    return (factor if factor is _BAD else _given(factor, 1)), (Fraction(1) if scaling is None else scaling)


def _parse_mig_profiles(
    sharing: dict[str, Any], mode: Mode, model: Any, profile: str | None, check: _DocumentChecker
) -> tuple[str, ...] | _Bad | None:
    """spec.sharing.migProfiles: the profiles the nodes' MIG layout offers (mig-parted's config), as a tuple;
    None when absent; _BAD when invalid (reported). `migProfile` must be among them: it is handed out too."""
    path = "spec.sharing.migProfiles"
    if "migProfiles" not in sharing:
        return None
    if mode is not Mode.MIG:
        check.problem(path, f"only applies when mode is mig (mode is {mode}); remove it")
        return _BAD
    entries = sharing["migProfiles"]
    if not isinstance(entries, list):
        check.expected(path, entries, f"expected a list of MIG profiles, got {describe(entries)}")
        return _BAD
    if not entries:
        check.problem(path, "is empty; list the profiles the nodes' MIG layout offers (mig-parted's config)")
        return _BAD
    gpu = GPU_MODELS.get(model) if isinstance(model, str) else None
    offered: list[str] = []
    for index, entry in enumerate(entries):
        where = f"{path}[{index}]"
        if check.string(entry, where, "a MIG profile name") is _BAD:
            return _BAD
        if gpu is not None and gpu.profile(entry) is None:
            valid = ", ".join(gpu.profile_names())
            check.problem(where, f"{quote_value(entry)} is not a MIG profile of {gpu.name} (valid: {valid})")
            return _BAD
        if not is_mig_profile_name(entry):
            check.problem(where, f"{quote_value(entry)} is not a MIG profile name; use <slices>g.<memory>gb[+me]")
            return _BAD
        if entry in offered:
            check.problem(where, f"{quote_value(entry)} is listed twice; remove one")
            return _BAD
        offered.append(entry)
    if profile is not None and profile not in offered:
        check.problem(
            "spec.sharing.migProfile",
            f"{quote_value(profile)} is not in migProfiles ({', '.join(offered)}): one GPU would become a slice the "
            "nodes do not offer; pick one of them",
        )
        return _BAD
    return tuple(offered)


def _parse_steering(spec: dict[str, Any], check: _DocumentChecker) -> Steering | _Bad:
    """spec.steering: true, false, or auto (the default; `_resolve_steering` says where auto steers)."""
    value = spec.get("steering", "auto")
    if isinstance(value, bool):
        return Steering.ON if value else Steering.OFF
    if value != "auto":
        check.expected("spec.steering", value, f"expected true, false or auto, got {describe(value)}")
        return _BAD
    return Steering.AUTO


class _ClusterSection(TypedDict):
    """spec.cluster as read: each check's level (or _BAD, reported) and the node shapes."""

    fits: Check | _Bad
    offered: Check | _Bad
    drift: Check | _Bad
    quota: Check | _Bad
    assumeNodes: tuple[AssumedNode, ...]


def _parse_cluster(section: dict[str, Any], check: _DocumentChecker) -> _ClusterSection:
    """spec.cluster: each check's level (warn unless set) and the node shapes the inventory cannot see."""
    path = "spec.cluster"

    def level(key: str, default: Check = Check.WARN) -> Check | _Bad:
        # YAML 1.1 reads an unquoted `off` as false: that is what the user meant.
        off = section.get(key) is False
        return Check.OFF if off else check.enum(section, key, path, Check, default)

    fits, offered, drift = (level(key) for key in _CLUSTER_FIELDS[:3])
    quota = level("quota", Check.DENY)
    shapes: list[AssumedNode] = []
    entries = section.get("assumeNodes", [])
    if not isinstance(entries, list):
        check.expected(f"{path}.assumeNodes", entries, f"expected a list of node shapes, got {describe(entries)}")
        entries = []
    for index, entry in enumerate(entries):
        where = f"{path}.assumeNodes[{index}]"
        shape = check.mapping(entry, where, _NODE_SHAPE_FIELDS)
        if shape is None:
            continue
        name: str | _Bad = _BAD
        if "name" not in shape:
            check.problem(f"{where}.name", "required; name the node shape (it appears in messages), e.g. a100-pool")
        else:
            name = check.string(shape["name"], f"{where}.name", "a name for the node shape, e.g. a100-pool")
        allocatable: list[tuple[str, int]] = []
        amounts = _open_mapping(shape, "allocatable", where, check)
        for resource in amounts:
            if not is_managed(resource):
                check.problem(
                    join_path(f"{where}.allocatable", resource),
                    "is not a GPU resource the webhook manages; list only GPU resources, e.g. nvidia.com/gpu: 8",
                )
                continue
            amount = check.integer(amounts, resource, f"{where}.allocatable", 1, "a node shape holds at least 1")
            if isinstance(amount, int):
                allocatable.append((resource, amount))
        if not amounts:
            check.problem(
                f"{where}.allocatable", "required; give the GPU resources one node holds, e.g. nvidia.com/gpu: 8"
            )
        labels: list[tuple[str, str]] = []
        for key, value in _open_mapping(shape, "labels", where, check).items():
            if check.string(value, join_path(f"{where}.labels", key), "a label value (quote numbers)") is not _BAD:
                labels.append((key, value))
        if name is not _BAD:
            shapes.append(AssumedNode(name, tuple(allocatable), tuple(labels)))
    return _ClusterSection(fits=fits, offered=offered, drift=drift, quota=quota, assumeNodes=tuple(shapes))


def _is_dns(name: str) -> bool:
    """A DNS subdomain, as the API server requires of object names and spec.schedulerName."""
    return len(name) <= 253 and _DNS_SUBDOMAIN.match(name) is not None


def _parse_device_classes(section: dict[str, Any], key: str, check: _DocumentChecker) -> tuple[str, ...]:
    """spec.deviceClasses.gpu or .mig: DeviceClass names (DNS subdomains, as the API server requires), each once."""
    path = f"spec.deviceClasses.{key}"
    if key not in section:
        return ()
    entries = section[key]
    if not isinstance(entries, list):
        check.expected(path, entries, f"expected a list of DeviceClass names, got {describe(entries)}")
        return ()
    if not entries:
        check.problem(path, "is empty; list DeviceClass names, or remove it")
        return ()
    wrong = "is not a DeviceClass name; use a DNS subdomain, e.g. gpu.example.com"
    return _unique_names(entries, path, "a DeviceClass name", check, lambda entry: None if _is_dns(entry) else wrong)


def _open_mapping(parent: dict[str, Any], key: str, path: str, check: _DocumentChecker) -> dict[str, Any]:
    """An optional mapping whose keys are the user's (resource names, label keys); {} when absent or invalid."""
    value = parent.get(key, {})
    if isinstance(value, dict):
        return value
    check.expected(join_path(path, key), value, f"expected a mapping, got {describe(value)}")
    return {}


def _parse_frameworks(spec: dict[str, Any], check: _DocumentChecker) -> tuple[str, ...]:
    path = "spec.frameworkEnv"
    if "frameworkEnv" not in spec:
        return DEFAULT_FRAMEWORK_ENV
    entries = spec["frameworkEnv"]
    if not isinstance(entries, list):
        check.expected(
            path, entries, f"expected a list of frameworks ({', '.join(FRAMEWORKS)}), got {describe(entries)}"
        )
        return ()

    def unknown(entry: str) -> str | None:
        return None if entry in FRAMEWORKS else _one_of(entry, FRAMEWORKS)

    return _unique_names(entries, path, "a framework name", check, unknown, quoted=False)


def _parse_trusted_schedulers(spec: dict[str, Any], check: _DocumentChecker) -> tuple[str, ...]:
    """spec.trustedSchedulers: scheduler names as a pod's spec.schedulerName holds them (DNS subdomains)."""
    path = "spec.trustedSchedulers"
    entries = spec.get("trustedSchedulers", [])
    if not isinstance(entries, list):
        check.expected(path, entries, f"expected a list of scheduler names, got {describe(entries)}")
        return ()
    wrong = (
        "is not a scheduler name (spec.schedulerName is a DNS subdomain: lowercase letters, digits, '-' and '.'); "
        "write it as pods name it, e.g. kai-scheduler"
    )
    return _unique_names(entries, path, "a scheduler name", check, lambda entry: None if _is_dns(entry) else wrong)


def _unique_names(
    entries: list[Any],
    path: str,
    noun: str,
    check: _DocumentChecker,
    problem: Callable[[str], str | None],
    quoted: bool = True,
) -> tuple[str, ...]:
    """A list of names: each a string (`noun`), valid (`problem` gives the line where it is not, after the
    quoted entry unless `quoted` is False), and listed once; the valid ones, in order."""
    chosen: list[str] = []
    for index, entry in enumerate(entries):
        where = f"{path}[{index}]"
        if check.string(entry, where, noun) is _BAD:
            continue
        wrong = problem(entry)
        if wrong is not None:
            check.problem(where, f"{quote_value(entry)} {wrong}" if quoted else wrong)
        elif entry in chosen:
            check.problem(where, f"{quote_value(entry)} is listed twice; remove one")
        else:
            chosen.append(entry)
    return tuple(chosen)


# --- The whole set -----------------------------------------------------------------------------------------


def _build(sources: Iterable[tuple[str, str | _Unreadable]]) -> PolicySet:
    problems: list[str] = []
    parsed: list[_Parsed] = []
    files: list[str] = []
    for name, text in sources:
        files.append(name)
        found, file_problems = _parse_source(name, text)
        parsed += found
        problems += file_problems
    problems += _set_problems(parsed)
    if problems:
        raise PolicyLoadError(problems)
    return PolicySet(_resolve_steering([p for p in parsed if p.policy is not None]), files=tuple(files))


def _parse_source(name: str, text: str | _Unreadable, numbered: bool = True) -> tuple[list[_Parsed], list[str]]:
    """One file's documents, each validated on its own, and the file's problems (at most MAX_PROBLEMS_PER_FILE).

    Problems name a document `<file>#<index>`, or `<name>` alone where not `numbered` (an object: one document)."""
    parsed: list[_Parsed] = []
    file_problems: list[str] = []
    if isinstance(text, str) and len(text) * 4 > MAX_FILE_BYTES:  # maybe over: measure the UTF-8 bytes
        size = len(text.encode("utf-8", "replace"))
        text = _too_large(size) if size > MAX_FILE_BYTES else text
    if isinstance(text, _Unreadable):
        return parsed, [f"{name}: {text.message}"]
    documents, stopped = read_documents(text)
    for index, document in enumerate(documents):
        if document.value is None and not document.problems:
            continue  # an empty document ("---" with nothing after it)
        source = f"{name}#{index}" if numbered else name
        doc_problems = list(document.problems)
        parsed.append(_parse_document(document.value, source, doc_problems))
        file_problems += [
            f"{source} {path}: {message}" if path else f"{source}: {message}" for path, message in doc_problems
        ]
    if stopped is not None:
        file_problems.append(f"{name}#{len(documents)}: {stopped}" if numbered else f"{name}: {stopped}")
    if len(file_problems) > MAX_PROBLEMS_PER_FILE:
        hidden = len(file_problems) - MAX_PROBLEMS_PER_FILE
        file_problems[MAX_PROBLEMS_PER_FILE:] = [f"{name}: {hidden} more problems in this file not shown"]
    return parsed, file_problems


def judge_sources(
    sources: Iterable[tuple[str, str]], served_order: Callable[[str], Any] | None = None
) -> tuple[PolicySet, dict[str, list[str]]]:
    """Each source (one policy object as YAML text) judged on its own: (the set of those that pass, and the
    problems of each source, empty where it passed). Pure.

    Unlike `load_policies`, one bad source does not fail the rest: the GPUPolicy objects of a cluster are
    judged one by one, because each has its own status. Sources come in precedence order: where two claim
    the same name or the same namespace or glob, the earlier one keeps it and the later one is not served,
    with the line that says which policy holds it. The set keeps the sources' order, or is sorted by
    `served_order(source name)` where given (the order that decides glob ties, which need not be precedence).
    """
    verdicts: dict[str, list[str]] = {}
    accepted: list[_Parsed] = []
    for name, text in sources:
        found, problems = _parse_source(name, text, numbered=False)
        if not problems:
            if len(found) != 1:
                problems = [f"{name}: holds {len(found)} policies; an object is one policy"]
            else:
                problems = _set_problems(accepted + found)
        verdicts[name] = problems
        if not problems:
            accepted += found
    if served_order is not None:
        accepted.sort(key=lambda entry: served_order(entry.source))
    return PolicySet(_resolve_steering(accepted), files=tuple(verdicts)), verdicts


def _resolve_steering(parsed: list[_Parsed]) -> tuple[Policy, ...]:
    """Each policy with `steering` decided. `auto` steers where the resource name alone cannot keep pods on the
    right pool: a shared or MIG policy whose replicas or slices keep the name `nvidia.com/gpu`, and a whole-GPU
    policy of a set that has such a policy (the cluster then has pools where `nvidia.com/gpu` is not a whole GPU).
    `on` steers wherever node labels tell the pools apart (`.shared` replicas by their count too); `off` never."""
    name_kept = any(_keeps_gpu_name(p.policy.sharing) for p in parsed if p.policy is not None)
    policies = []
    for entry in parsed:
        policy = entry.policy
        assert policy is not None
        if entry.steering is Steering.AUTO:
            sharing = policy.sharing
            steer = _keeps_gpu_name(sharing) or (sharing.mode is Mode.EXCLUSIVE and name_kept)
            # ACK's shared pools differ by node label alone (`share` does not isolate memory), as does placement.
            steer = steer or sharing.backend is Backend.ACK
        else:
            steer = entry.steering is Steering.ON
        policies.append(replace(policy, steering=steer, memo={}) if steer else policy)
    return tuple(policies)


def _keeps_gpu_name(sharing: Sharing) -> bool:
    """Whether `nvidia.com/gpu` is a shared replica or a MIG slice under `sharing` (the device plugin keeps the
    name): the loader's reading of the backends' `replica_resource`, which it cannot import (it is below them;
    tests/test_sharing_backends.py holds the two to the same answer)."""
    if sharing.mode in SHARED_MODES:
        return sharing.resource_name == NVIDIA_GPU
    return sharing.mode is Mode.MIG and sharing.mig_strategy is MigStrategy.SINGLE


def _set_problems(parsed: list[_Parsed]) -> list[str]:
    """Names unique across the set; each namespace or glob in one policy only."""
    problems: list[str] = []
    names: dict[str, _Parsed] = {}
    patterns: dict[str, _Parsed] = {}
    for entry in parsed:
        if entry.name is not None:
            first = names.setdefault(entry.name, entry)
            if first is not entry:
                problems.append(
                    f"{entry.source} metadata.name: {quote_value(entry.name)} is already the name of the policy in "
                    f"{first.source}; give each policy a unique name"
                )
        for index, pattern in entry.namespaces:
            first = patterns.setdefault(pattern, entry)
            if first is not entry:
                kind = "glob" if is_glob(pattern) else "namespace"
                problems.append(
                    f"{entry.source} spec.namespaces[{index}]: {kind} {quote_value(pattern)} is listed by both "
                    f'policy "{first.name}" ({first.source}) and policy "{entry.name}" ({entry.source}); '
                    "keep it in one of them"
                )
    return problems
